#include "eval/replay/replayer.h"

#include <stdlib.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/work_dir.h"
#include "eval/replay/no_sync_tier.h"
#include "eval/replay/trace_stats.h"

namespace kvtier::internal {

// Work folders for the tiers kept in files, removed when the run ends; each is marked, so the next
// run removes the folders of a run that was killed (core/work_dir.h).
class RunDirs {
 public:
  // A fresh tier directory in a new work folder under `parent` (created if missing). The tier gets a
  // folder of its own: the work folder also holds its marker, and a tier takes only empty folders.
  Result<std::string> Make(const std::string& parent) {
    KVTIER_ASSIGN_OR_RETURN(WorkDir dir, WorkDir::Create(parent, "kvtier-replay"));
    dirs_.push_back(std::move(dir));
    return dirs_.back().path() + "/tier";
  }

 private:
  std::vector<WorkDir> dirs_;
};

namespace {

// The scaled payload of a block: a pattern of its hash id, so a load that returns another block's
// bytes is caught.
void FillBlock(uint32_t hash_id, std::span<std::byte> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t word = hash_id ^ static_cast<uint32_t>(i / 4 * 0x9E3779B9u);
    out[i] = static_cast<std::byte>(word >> (8 * (i % 4)));
  }
}

// Tiers neither in memory nor in a run directory: a shared store such as redis://.
bool KeepsChunksElsewhere(const ReplayTier& t) { return !t.UsesPath() && t.parsed.scheme != "mem"; }

// Removes the chunks a run wrote to the stores that outlive it (listing sees only the run's prefix).
void RemoveRunChunks(const ReplayOptions& options, Store& store) {
  for (size_t t = 0; t < options.tiers.size() && t < store.tier_count(); ++t) {
    if (!KeepsChunksElsewhere(options.tiers[t])) continue;
    std::vector<ChunkId> ids;
    (void)store.tier(t).List([&](const ChunkInfo& info) {
      ids.push_back(info.id);
      return true;
    });
    for (const ChunkId& id : ids) (void)store.tier(t).Remove(id);
  }
}

}  // namespace

// Buffers for one request: one contiguous area, one piece per block.
struct RequestBuffers {
  std::vector<std::byte> bytes;
  std::vector<std::span<std::byte>> pieces;
  std::vector<std::span<const std::byte>> const_pieces;
  std::vector<ScatterList> dsts;
  std::vector<GatherList> srcs;
  std::vector<std::byte> expect;  // what a loaded block must hold
  std::vector<size_t> served_by;  // tier expected to serve each leading block

  void Resize(size_t blocks, size_t block_bytes) {
    bytes.resize(blocks * block_bytes);
    pieces.resize(blocks);
    const_pieces.resize(blocks);
    dsts.resize(blocks);
    srcs.resize(blocks);
    for (size_t i = 0; i < blocks; ++i) {
      pieces[i] = std::span<std::byte>(bytes.data() + i * block_bytes, block_bytes);
      const_pieces[i] = pieces[i];
      dsts[i] = ScatterList(&pieces[i], 1);
      srcs[i] = GatherList(&const_pieces[i], 1);
    }
  }
};

Result<std::unique_ptr<Replayer>> Replayer::Make(const Trace& trace, const ReplayScale& scale,
                                                 std::string_view model_id) {
  KVTIER_RETURN_IF_ERROR(scale.Validate());
  if (trace.block_tokens != scale.block_tokens) {
    return Status::InvalidArgument("trace and replay disagree on block tokens");
  }
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, Namespace::Make(model_id, scale.ReplayLayout(), "replay"));
  std::unique_ptr<Replayer> r(new Replayer(trace, scale, std::move(ns)));
  r->keys_.reserve(trace.block_refs);
  r->offsets_.reserve(trace.requests.size() + 1);
  r->offsets_.push_back(0);
  for (const TraceRequest& req : trace.requests) {
    const size_t first = r->keys_.size();
    for (size_t j = 0; j < req.hash_ids.size(); ++j) {
      const ChunkKey* prev = j ? &r->keys_[first + j - 1] : nullptr;
      r->keys_.push_back(
          NextChunkKey(r->ns_, prev, std::span<const uint32_t>(&req.hash_ids[j], 1)));
    }
    r->offsets_.push_back(r->keys_.size());
  }
  return r;
}

std::span<const ChunkKey> Replayer::KeysOf(size_t request) const {
  return std::span<const ChunkKey>(keys_).subspan(offsets_[request],
                                                  offsets_[request + 1] - offsets_[request]);
}

Result<std::unique_ptr<Store>> Replayer::OpenStore(const ReplayOptions& options,
                                                   RunDirs* dirs) const {
  StoreOptions so;
  so.admission = options.admission;
  so.promote_on_load = true;
  std::vector<std::unique_ptr<Tier>> tiers;
  for (const ReplayTier& t : options.tiers) {
    std::string path;
    if (t.UsesPath()) {
      std::error_code ec;
      const std::string parent =
          t.parsed.path.empty() ? std::filesystem::current_path(ec).string() : t.parsed.path;
      if (ec) return Status::FromErrno(ec.value(), "current directory");
      KVTIER_ASSIGN_OR_RETURN(path, dirs->Make(parent));
    }
    std::string url = t.OpenUrl(options.unlimited_blocks, path);
    if (KeepsChunksElsewhere(t)) {
      // A store that outlives the run (redis://): chunks of this run under a prefix of its own, so an
      // earlier run's chunks are not hits; removed at the end of the run (RemoveRunChunks).
      KVTIER_ASSIGN_OR_RETURN(TierUrl u, TierUrl::Parse(url));
      static std::atomic<uint64_t> runs{0};
      u.params["prefix"] += "kvtier-replay-" + std::to_string(::getpid()) + "-" + std::to_string(runs++) + "/";
      url = u.ToString();
    }
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, OpenTier(url));
    tiers.push_back(WrapWithoutSync(std::move(tier)));
  }
  return Store::Open(std::move(tiers), so);
}

Status Replayer::ReplayRequest(size_t i, Store& store, RequestBuffers& buf, ReplayRun* run) const {
  const TraceRequest& req = trace_.requests[i];
  const std::span<const ChunkKey> keys = KeysOf(i);
  const size_t block_bytes = scale_.BlockBytes();
  buf.Resize(keys.size(), block_bytes);

  // Which tier will serve each leading block: the fastest holding it, as the Store reads.
  const size_t found = store.Lookup(ns_, keys);
  buf.served_by.assign(found, store.tier_count());
  for (size_t j = 0; j < found; ++j) {
    const ChunkId id = ChunkId::Of(ns_, keys[j]);
    for (size_t t = 0; t < store.tier_count(); ++t) {
      if (store.tier(t).Contains(id)) {
        buf.served_by[j] = t;
        break;
      }
    }
  }
  KVTIER_ASSIGN_OR_RETURN(
      const size_t loaded,
      store.Load(ns_, keys.first(found), std::span<const ScatterList>(buf.dsts).first(found)));
  for (size_t j = 0; j < loaded; ++j) {
    FillBlock(req.hash_ids[j], buf.expect);
    if (std::memcmp(buf.expect.data(), buf.pieces[j].data(), block_bytes) != 0) ++run->wrong_blocks;
    if (buf.served_by[j] < run->tiers.size()) {
      TierReplayResult& tr = run->tiers[buf.served_by[j]];
      ++tr.hit_blocks;
      tr.hit_tokens +=
          HitTokens(req, j + 1, trace_.block_tokens) - HitTokens(req, j, trace_.block_tokens);
    }
  }
  run->hit_blocks += loaded;
  run->hit_tokens += HitTokens(req, loaded, trace_.block_tokens);
  run->hit_blocks_per_request.push_back(static_cast<uint32_t>(loaded));

  // The engine recomputed every block after the loaded prefix and saves them all.
  for (size_t j = loaded; j < keys.size(); ++j) FillBlock(req.hash_ids[j], buf.pieces[j]);
  KVTIER_RETURN_IF_ERROR(
      store.Save(ns_, keys.subspan(loaded), std::span<const GatherList>(buf.srcs).subspan(loaded)));
  run->saved_blocks += keys.size() - loaded;
  if (store.tier_count() > 1) KVTIER_RETURN_IF_ERROR(store.Flush());  // background writes done
  run->requests++;
  run->input_tokens += req.input_length;
  run->block_refs += keys.size();
  return Status::OK();
}

void Replayer::AddBelady(const ReplayOptions& options, ReplayRun* run) const {
  uint64_t combined = 0;  // 0: unlimited
  bool unlimited = false;
  for (size_t t = 0; t < run->tiers.size(); ++t) {
    const uint64_t cap = options.tiers[t].unlimited ? 0 : options.tiers[t].capacity_blocks;
    unlimited = unlimited || cap == 0;
    combined += cap;
    run->tiers[t].belady = Belady(trace_, cap);
  }
  run->belady = run->tiers.size() == 1 ? run->tiers[0].belady : Belady(trace_, unlimited ? 0 : combined);
}

Result<ReplayRun> Replayer::Run(const ReplayOptions& options) const {
  if (options.tiers.empty()) return Status::InvalidArgument("a replay needs at least one tier");
  RunDirs dirs;  // declared first: removed only after the store has closed its tiers
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStore(options, &dirs));
  ReplayRun run;
  run.admission = options.admission;
  run.tiers.resize(options.tiers.size());
  run.hit_blocks_per_request.reserve(trace_.requests.size());
  RequestBuffers buf;
  buf.expect.resize(scale_.BlockBytes());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < trace_.requests.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(ReplayRequest(i, *store, buf, &run));
  }
  KVTIER_RETURN_IF_ERROR(store->Flush());
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.store = store->Stats();
  for (size_t t = 0; t < run.tiers.size(); ++t) {
    run.tiers[t].url = options.tiers[t].url;
    run.tiers[t].unlimited = options.tiers[t].unlimited;
    run.tiers[t].capacity_blocks = options.tiers[t].capacity_blocks;
    run.tiers[t].stored_block_bytes = options.tiers[t].stored_block_bytes;
    if (t < run.store.tiers.size()) run.tiers[t].stats = run.store.tiers[t];
  }
  AddBelady(options, &run);
  RemoveRunChunks(options, *store);
  return run;
}

}  // namespace kvtier::internal
