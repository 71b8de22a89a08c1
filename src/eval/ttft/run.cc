#include "eval/ttft/run.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "eval/benchlib/datapath_io.h"
#include "eval/benchlib/datapath_passes.h"
#include "core/thread_annotations.h"
#include "core/work_dir.h"
#include "eval/gpuprofile/gpu_profile.h"
#include "eval/ttft/session.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBufferAlign = size_t{2} << 20;  // a huge page: O_DIRECT reads land in place

// Heap bytes aligned for O_DIRECT, touched once so page faults are not timed as load time.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t n) : n_(n) {
    const size_t rounded = (n + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    p_ = static_cast<std::byte*>(std::aligned_alloc(kBufferAlign, std::max(rounded, kBufferAlign)));
    if (p_ != nullptr) std::memset(p_, 0, n_);
  }
  ~AlignedBytes() { std::free(p_); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  std::byte* data() const { return p_; }
  size_t size() const { return p_ != nullptr ? n_ : 0; }

 private:
  std::byte* p_ = nullptr;
  size_t n_ = 0;
};

// The KV every save writes: one chunk of pseudo-random bytes (the tiers checksum what they store, so
// identical payloads under different keys are stored and verified like any others).
std::unique_ptr<AlignedBytes> SourceChunk(uint64_t chunk_bytes) {
  auto src = std::make_unique<AlignedBytes>(chunk_bytes);
  uint64_t x = 0x2545F4914F6CDD1Dull;
  for (size_t i = 0; i + 8 <= src->size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(src->data() + i, &x, 8);
  }
  return src;
}

Result<Namespace> BenchNamespace(const TtftOptions& o) {
  return Namespace::Make(o.model.model_id, o.model.layout, "kvtier-bench-ttft");
}

// Loads keys[0..n) in batches into `buf`; returns the chunks loaded (a prefix).
Result<uint64_t> LoadPrefix(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                            const AlignedBytes& buf, uint64_t chunk_bytes, uint32_t batch) {
  std::vector<std::span<std::byte>> pieces(batch);
  std::vector<ScatterList> dsts(batch);
  for (uint32_t i = 0; i < batch; ++i) {
    pieces[i] = std::span<std::byte>(buf.data() + i * chunk_bytes, chunk_bytes);
    dsts[i] = ScatterList(&pieces[i], 1);
  }
  uint64_t loaded = 0;
  while (loaded < keys.size()) {
    const size_t n = std::min<size_t>(batch, keys.size() - loaded);
    KVTIER_ASSIGN_OR_RETURN(size_t got, store.Load(ns, keys.subspan(loaded, n),
                                                   std::span<const ScatterList>(dsts).first(n)));
    loaded += got;
    if (got < n) break;
  }
  return loaded;
}

// Saves keys[from..to) of a session, every chunk from `src`.
Status SaveChunks(Store& store, const Namespace& ns, std::span<const ChunkKey> keys, uint64_t from,
                  uint64_t to, const AlignedBytes& src) {
  if (from >= to) return Status::OK();
  const std::span<const std::byte> piece(src.data(), src.size());
  std::vector<GatherList> srcs(to - from, GatherList(&piece, 1));
  return store.Save(ns, keys.subspan(from, to - from), srcs);
}

struct Shared {
  Shared(const TtftOptions& o_, Store* store_, TtftClock& clock_, const Namespace& ns_,
         const AlignedBytes& src_, uint32_t sessions_)
      : o(o_), store(store_), clock(clock_), ns(ns_), src(src_), sessions(sessions_) {}
  const TtftOptions& o;
  Store* store;
  TtftClock& clock;
  SimGpu gpu;
  const Namespace& ns;
  const AlignedBytes& src;
  const uint32_t sessions;
  std::atomic<uint32_t> done{0};
  Mutex mu;
  std::vector<TurnRecord> turns GUARDED_BY(mu);
  std::string error GUARDED_BY(mu);
};

// One returning turn of `s`.
Result<TurnRecord> Turn(Shared& sh, const TtftSession& s, uint32_t turn, const AlignedBytes& buf) {
  const TtftOptions& o = sh.o;
  const uint64_t chunk_tokens = o.model.layout.tokens_per_chunk;
  const uint64_t chunk_bytes = o.model.layout.BytesPerChunk();
  const TurnShape shape = ShapeOf(o, turn);
  TurnRecord r;
  r.session = s.id;
  r.turn = turn;
  r.arrival = sh.clock.Now();
  uint64_t loaded = 0;
  if (sh.store != nullptr) {
    const std::span<const ChunkKey> prefix = std::span<const ChunkKey>(s.keys).first(shape.saved_chunks);
    const size_t found = sh.store->Lookup(sh.ns, prefix);
    KVTIER_ASSIGN_OR_RETURN(loaded, LoadPrefix(*sh.store, sh.ns, prefix.first(found), buf, chunk_bytes,
                                               o.load_batch_chunks));
    r.missing_chunks = shape.saved_chunks - loaded;
  }
  r.ready = sh.clock.Now();
  r.load_s = r.ready - r.arrival;
  r.load_bytes = loaded * chunk_bytes;
  r.cached_tokens = loaded * chunk_tokens;
  r.min_bytes = MinimumPrefixBytes(o.model.layout, r.cached_tokens);
  r.new_tokens = shape.prompt_tokens - r.cached_tokens;
  r.compute_s = PrefillSeconds(o.model, o.gpu, r.cached_tokens, r.new_tokens);
  const GpuSlot slot = sh.gpu.Run(r.ready, r.compute_s);
  r.start = slot.start;
  r.end = slot.end;
  sh.clock.SleepUntil(slot.end);
  // After the first token: keep the prompt's new chunks for the next turn (what the server saves).
  if (sh.store != nullptr) {
    KVTIER_RETURN_IF_ERROR(SaveChunks(*sh.store, sh.ns, s.keys, loaded, shape.prompt_chunks, sh.src));
    // A user's next message comes after the answer, by which time the background writes to lower
    // tiers are done; without this wait a closed loop with no think time would find its own last
    // chunk still queued and count it missing.
    KVTIER_RETURN_IF_ERROR(sh.store->Flush());
  }
  return r;
}

// Client `index` of `clients` serves sessions index, index + clients, ... one after another: each
// client is one user at a time, so `clients` sessions are active at once however threads are scheduled.
void Client(Shared& sh, uint32_t index, uint32_t clients, ProgressReporter* progress, const std::string& tag) {
  const uint64_t chunk_bytes = sh.o.model.layout.BytesPerChunk();
  const uint64_t batch = std::min<uint64_t>(sh.o.load_batch_chunks, SessionChunks(sh.o));
  AlignedBytes buf(sh.store != nullptr ? batch * chunk_bytes : 0);
  const uint32_t total = sh.sessions * sh.o.turns;
  for (uint32_t id = index; id < sh.sessions; id += clients) {
    const TtftSession s = MakeSession(sh.o, sh.ns, id);
    for (uint32_t t = 0; t < sh.o.turns; ++t) {
      Result<TurnRecord> r = Turn(sh, s, t, buf);
      MutexLock lock(sh.mu);
      if (!r.ok()) {
        if (sh.error.empty()) {
          sh.error = "session " + std::to_string(id) + " turn " + std::to_string(t) + ": " + r.status().ToString();
        }
        return;
      }
      sh.turns.push_back(*r);
      lock.Unlock();
      const uint32_t d = ++sh.done;
      if (progress != nullptr) {
        progress->Update("  " + tag + ": " + std::to_string(d) + "/" + std::to_string(total) + " turns");
      }
    }
  }
}

}  // namespace

std::vector<std::string> TtftTierUrls(const std::string& mode, const std::string& dir, const TtftFootprint& fp) {
  const std::string mem = "mem://?capacity=" + std::to_string(fp.mem_tier_bytes);
  // file:// enforces its capacity before each write: room for the point plus a margin.
  const std::string file = "file://" + dir + "/file?capacity=" + std::to_string(fp.disk_bytes + (fp.disk_bytes / 4) + (64ull << 20));
  if (mode == "mem") return {mem};
  if (mode == "file") return {file};
  if (mode == "fs") return {"fs://" + dir + "/fs"};
  if (mode == "mem+file") return {mem, file};
  return {};
}

Status PopulatePoint(const TtftOptions& o, const std::string& mode, uint32_t sessions, Store& store) {
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, BenchNamespace(o));
  const auto src = SourceChunk(o.model.layout.BytesPerChunk());
  const std::span<const std::byte> piece(src->data(), src->size());
  const uint64_t n = InitialChunks(o);
  for (uint32_t id = 0; id < sessions; ++id) {
    const TtftSession s = MakeSession(o, ns, id);
    const bool in_mem = mode == "mem" || (mode == "mem+file" && id >= sessions / 2);
    for (uint64_t i = 0; i < n; ++i) {
      const ChunkId cid = ChunkId::Of(ns, s.keys[i]);
      if (mode == "mem+file") KVTIER_RETURN_IF_ERROR(store.tier(1).Put(cid, GatherList(&piece, 1)));
      if (mode != "mem+file" || in_mem) KVTIER_RETURN_IF_ERROR(store.tier(0).Put(cid, GatherList(&piece, 1)));
    }
  }
  return store.Flush();
}

PointResult RunPoint(const TtftOptions& o, const std::string& mode, uint32_t concurrency, Store* store,
                     TtftClock& clock, ProgressReporter* progress) {
  PointResult out;
  out.mode = mode;
  out.concurrency = concurrency;
  out.sessions = std::max(concurrency, o.min_sessions);
  auto ns = BenchNamespace(o);
  if (!ns.ok()) {
    out.error = ns.status().ToString();
    return out;
  }
  const auto src = SourceChunk(store != nullptr ? o.model.layout.BytesPerChunk() : 0);
  Shared sh(o, store, clock, *ns, *src, out.sessions);
  const std::string tag = mode + " c=" + std::to_string(concurrency);
  const double t0 = clock.Now();
  const uint64_t skipped0 = store != nullptr ? store->Stats().load_bytes_skipped : 0;
  {
    std::vector<std::thread> clients;
    for (uint32_t c = 0; c < concurrency; ++c) {
      clients.emplace_back([&sh, c, concurrency, progress, &tag] { Client(sh, c, concurrency, progress, tag); });
    }
    for (auto& t : clients) t.join();
  }
  out.wall_s = clock.Now() - t0;
  if (store != nullptr) out.load_bytes_skipped = store->Stats().load_bytes_skipped - skipped0;
  out.gpu_busy_s = sh.gpu.busy_seconds();
  MutexLock lock(sh.mu);
  out.turns = std::move(sh.turns);
  out.error = std::move(sh.error);
  std::sort(out.turns.begin(), out.turns.end(), [](const TurnRecord& a, const TurnRecord& b) {
    return a.arrival != b.arrival ? a.arrival < b.arrival : a.session < b.session;
  });
  return out;
}

Result<std::vector<PointResult>> RunTtft(const TtftOptions& o, ProgressReporter* progress) {
  KVTIER_RETURN_IF_ERROR(ValidateTtft(o));
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = !o.dir.empty() ? o.dir : (tmp != nullptr && *tmp ? tmp : "/tmp");
  KVTIER_ASSIGN_OR_RETURN(uint64_t memory, AvailableMemoryBytes());
  KVTIER_ASSIGN_OR_RETURN(uint64_t disk, FreeBytesAt(parent));
  KVTIER_RETURN_IF_ERROR(CheckTtftFits(o, memory, disk));
  KVTIER_ASSIGN_OR_RETURN(WorkDir work, WorkDir::Create(parent, "kvtier-ttft"));
  std::vector<PointResult> out;
  for (const std::string& mode : o.modes) {
    for (uint32_t c : o.concurrency) {
      const TtftFootprint fp = FootprintOf(o, mode, c);
      const std::string dir = work.path() + "/" + (mode == "mem+file" ? std::string("mem-file") : mode) +
                              "-c" + std::to_string(c);
      std::unique_ptr<Store> store;
      if (mode != "recompute") {
        if (progress) progress->Note("ttft " + mode + " c=" + std::to_string(c) + ": saving " +
                                     std::to_string(fp.sessions) + " sessions' prefixes (" +
                                     FormatBytes(fp.sessions * InitialChunks(o) * o.model.layout.BytesPerChunk()) + ")");
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) return Status::FromErrno(ec.value(), "create " + dir);
        StoreOptions so;
        so.tiers = TtftTierUrls(mode, dir, fp);
        KVTIER_ASSIGN_OR_RETURN(store, Store::Open(so));
        KVTIER_RETURN_IF_ERROR(PopulatePoint(o, mode, fp.sessions, *store));
        KVTIER_RETURN_IF_ERROR(DropPageCache(dir).status());
      }
      if (progress) progress->Note("ttft " + mode + " c=" + std::to_string(c) + ": returning turns");
      SteadyTtftClock clock;
      PointResult p = RunPoint(o, mode, c, store.get(), clock, progress);
      if (progress) progress->Done();
      if (store) KVTIER_RETURN_IF_ERROR(store->Flush());
      store.reset();
      std::error_code ec;
      fs::remove_all(dir, ec);  // this run created it, inside its own work folder
      if (!p.error.empty()) return Status::IOError("ttft " + mode + " c=" + std::to_string(c) + ": " + p.error);
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace kvtier::internal
