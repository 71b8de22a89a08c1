// Store::Open and the read side of StoreImpl (Lookup, Load, promotion, stats).
// The write side (Save, Prefetch, background jobs) is in store_save.cc.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <thread>

#include "core/threads.h"
#include "core/window_ranges.h"
#include "core/uri_encode.h"
#include "store/store_impl.h"

namespace kvtier {

using internal::StoreImpl;

Result<std::unique_ptr<Store>> Store::Open(std::vector<std::unique_ptr<Tier>> tiers,
                                           const StoreOptions& options) {
  if (tiers.empty()) return Status::InvalidArgument("a store needs at least one tier");
  if (tiers.size() > 64) return Status::InvalidArgument("a store takes at most 64 tiers");
  for (const auto& t : tiers) {
    if (t == nullptr) return Status::InvalidArgument("a store tier is null");
  }
  if (options.background_threads == 0) {
    return Status::InvalidArgument("StoreOptions::background_threads must be at least 1");
  }
  auto store = std::make_unique<StoreImpl>(std::move(tiers), options);
  KVTIER_RETURN_IF_ERROR(store->StartStatus());  // background_threads the OS would not start
  return std::unique_ptr<Store>(std::move(store));
}

namespace {

// `url` with key_file= set for every tier that stores chunks outside this process's memory (all but
// mem://: file://, fs://, shm:// and the object tiers) when `key_file` is not empty. A scheme that does not
// know key_file= then fails to open rather than storing plain chunks.
Result<std::string> WithKeyFile(const std::string& url, const std::string& key_file) {
  if (key_file.empty()) return url;
  KVTIER_ASSIGN_OR_RETURN(TierUrl parsed, TierUrl::Parse(url));
  if (parsed.scheme == "mem") return url;
  if (auto it = parsed.params.find("key_file"); it != parsed.params.end()) {
    if (it->second != key_file) {
      return Status::InvalidArgument("tier URL names another key_file than StoreOptions::key_file");
    }
    return url;
  }
  return url + (url.find('?') == std::string::npos ? "?" : "&") +
         "key_file=" + internal::UriEncode(key_file, /*keep_slash=*/true);
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  if (options.tiers.empty()) return Status::InvalidArgument("StoreOptions::tiers is empty");
  std::vector<std::unique_ptr<Tier>> tiers;
  for (const std::string& given : options.tiers) {
    KVTIER_ASSIGN_OR_RETURN(const std::string url, WithKeyFile(given, options.key_file));
    auto t = OpenTier(url, TierOpenOptions{.read_only = options.read_only, .host_allocator = options.host_allocator});
    if (!t.ok()) {
      const Status& s = t.status();
      return Status(s.code(), "opening tier " + url + ": " + s.message(), s.retryable());
    }
    tiers.push_back(std::move(t).value());
  }
  return Open(std::move(tiers), options);
}

namespace internal {

StoreImpl::StoreImpl(std::vector<std::unique_ptr<Tier>> tiers, const StoreOptions& options)
    : tiers_(std::move(tiers)), options_(options) {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    caps_.push_back(tiers_[t]->capabilities());
    if (!caps_[t].in_memory) background_mask_ |= uint64_t{1} << t;
    lend_capacity_.push_back(caps_[t].in_memory ? tiers_[t]->Stats().capacity_bytes : 0);
  }
  if (options_.admission == Admission::kSecondUse) seen_ = std::make_unique<SeenTable>();
  tier_dropped_ = std::make_unique<std::atomic<uint64_t>[]>(tiers_.size());
  tier_length_corrupt_ = std::make_unique<std::atomic<uint64_t>[]>(tiers_.size());
  ListenForEvictions();
  queue_ = std::make_unique<SaveQueue>(options_.save_queue_bytes, options_.save_queue_chunks,
                                       options_.background_threads,
                                       [this](SaveJob& job) { RunJob(job); });
}

StoreImpl::~StoreImpl() {
  queue_.reset();  // drains and joins before the tiers go
  StopListening();
}

int StoreImpl::FirstHolder(const ChunkId& id, size_t from) const {
  for (size_t t = from; t < tiers_.size(); ++t) {
    if (tiers_[t]->Contains(id)) return static_cast<int>(t);
  }
  return -1;
}

std::vector<int> StoreImpl::LeadingHolders(std::span<const ChunkId> ids, bool assume_last) const {
  const size_t asked = assume_last ? tiers_.size() - 1 : tiers_.size();
  std::vector<int> holders;
  // Windows grow from 8 chunks: a short prefix costs few presence checks in slow tiers, a long one
  // few round trips.
  for (size_t at = 0, window = 8; at < ids.size(); at += window, window *= 2) {
    const std::span<const ChunkId> part = ids.subspan(at, std::min(window, ids.size() - at));
    std::vector<int> holder(part.size(), -1);
    std::vector<ChunkId> ask(part.begin(), part.end());
    std::vector<size_t> pos(part.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = i;
    for (size_t t = 0; t < asked && !ask.empty(); ++t) {
      std::unique_ptr<bool[]> present(new bool[ask.size()]());
      tiers_[t]->ContainsMany(ask, std::span<bool>(present.get(), ask.size()));
      size_t kept = 0;
      for (size_t i = 0; i < ask.size(); ++i) {
        if (present[i]) {
          holder[pos[i]] = static_cast<int>(t);
        } else {
          ask[kept] = ask[i];
          pos[kept++] = pos[i];
        }
      }
      ask.resize(kept);
      pos.resize(kept);
    }
    if (assume_last) {
      for (size_t p : pos) holder[p] = static_cast<int>(tiers_.size() - 1);
    }
    for (int h : holder) {
      if (h < 0) return holders;
      holders.push_back(h);
    }
  }
  return holders;
}

size_t StoreImpl::Lookup(const Namespace& ns, std::span<const ChunkKey> keys) {
  std::vector<ChunkId> ids;
  ids.reserve(keys.size());
  for (const ChunkKey& k : keys) ids.push_back(ChunkId::Of(ns, k));
  const size_t n = LeadingHolders(ids).size();
  lookups_.fetch_add(1, std::memory_order_relaxed);
  lookup_hit_.fetch_add(n, std::memory_order_relaxed);
  lookup_missed_.fetch_add(keys.size() - n, std::memory_order_relaxed);
  NamespaceCounters& c = namespaces_.For(ns.id());
  const uint64_t tokens = ns.layout().tokens_per_chunk;
  c.lookups.fetch_add(1, std::memory_order_relaxed);
  c.lookup_chunks.fetch_add(keys.size(), std::memory_order_relaxed);
  c.lookup_tokens.fetch_add(keys.size() * tokens, std::memory_order_relaxed);
  c.hit_chunks.fetch_add(n, std::memory_order_relaxed);
  c.hit_tokens.fetch_add(n * tokens, std::memory_order_relaxed);
  return n;
}

void StoreImpl::RemoveIfLengthDisagrees(size_t tier, const ChunkId& id, const Status& st) {
  // Load checked every destination against the layout's chunk size before reading, so a tier's
  // InvalidArgument (its "destination holds N bytes but the stored chunk has M") means the stored
  // chunk's length disagrees with the layout its header names: a tampered or broken header. Kept,
  // later saves would skip the key as present and it would miss forever: removed (a miss now), and
  // counted with the tier's other corrupt chunks (detected, as the tiers count theirs).
  if (st.code() != Code::kInvalidArgument) return;
  tier_length_corrupt_[tier].fetch_add(1, std::memory_order_relaxed);
  (void)tiers_[tier]->Remove(id);
}

size_t StoreImpl::ReadPlanned(std::span<const ChunkId> ids, std::span<const ScatterList> dsts,
                              std::vector<int>& from, std::vector<bool>& read,
                              std::span<const std::unique_ptr<ChunkLanding>> progress,
                              std::span<const std::vector<ByteRange>> skip) {
  const size_t n = ids.size();
  std::vector<std::vector<ReadOp>> batches(tiers_.size());
  std::vector<std::vector<size_t>> index(tiers_.size());
  std::vector<size_t> ranged;  // chunks read without their skipped window ranges (store_window.cc)
  const std::vector<ByteRange> none;
  auto skip_of = [&](size_t i) -> std::span<const ByteRange> { return skip.empty() ? none : skip[i]; };
  for (size_t i = 0; i < n; ++i) {
    if (!skip_of(i).empty() && ReadsRanges(from[i])) {
      ranged.push_back(i);
      continue;
    }
    ReadProgress* landing = progress.empty() ? nullptr : progress[i].get();
    batches[from[i]].push_back(ReadOp{ids[i], dsts[i], Status::OK(), landing});
    index[from[i]].push_back(i);
  }
  // Tiers read their batches at the same time: a slow tier's reads overlap the fast tier's copies.
  // The fastest tier with work runs on the caller's thread.
  std::vector<std::thread> helpers;
  int first = -1;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (batches[t].empty()) continue;
    if (first < 0) {
      first = static_cast<int>(t);
    } else {
      auto job = [this, t, &batches] { tiers_[t]->GetMany(batches[t]); };
      if (!TryStartThread(&helpers, job)) job();  // no thread to spare: read this tier here
    }
  }
  std::vector<Status> ranged_status;
  if (!ranged.empty()) {
    auto job = [&] { ReadRangedChunks(ranged, ids, dsts, from, skip, ranged_status); };
    if (!TryStartThread(&helpers, job)) job();
  }
  if (first >= 0) tiers_[first]->GetMany(batches[first]);
  for (auto& h : helpers) h.join();
  std::vector<bool> ok(n, false);
  // What one read of chunk i from tier t says (batched, ranged or a retry from a slower tier).
  const auto settle = [&](size_t i, size_t t, const Status& st) {
    ok[i] = st.ok();
    if (!st.IsNotFound()) read[i] = true;
    RemoveIfLengthDisagrees(t, ids[i], st);
    if (ok[i] && !progress.empty()) progress[i]->Complete(TotalBytes(dsts[i]));
  };
  for (size_t t = 0; t < tiers_.size(); ++t) {
    for (size_t b = 0; b < batches[t].size(); ++b) settle(index[t][b], t, batches[t][b].status);
  }
  for (size_t j = 0; j < ranged.size(); ++j) settle(ranged[j], static_cast<size_t>(from[ranged[j]]), ranged_status[j]);
  // A bad or vanished copy is a miss in that tier, not the end: slower tiers may hold a good one. Not
  // when the failed read had already reported bytes as landed: the caller may have used them, and the
  // failure zeroed them, so the chunk ends the prefix however a second read would go.
  for (size_t i = 0; i < n; ++i) {
    while (!ok[i]) {
      if (!progress.empty() && progress[i]->reported()) return i;
      const int t = FirstHolder(ids[i], static_cast<size_t>(from[i]) + 1);
      if (t < 0) return i;
      from[i] = t;
      settle(i, static_cast<size_t>(t), ReadChunk(t, ids[i], dsts[i], skip_of(i)));
    }
  }
  return n;
}

Result<size_t> StoreImpl::Load(const Namespace& ns, std::span<const ChunkKey> keys,
                               std::span<const ScatterList> dsts) {
  return LoadWithProgress(ns, keys, dsts, nullptr);
}

Result<size_t> StoreImpl::LoadWithProgress(const Namespace& ns, std::span<const ChunkKey> keys,
                                           std::span<const ScatterList> dsts, LoadProgress* progress) {
  const uint64_t bytes = ns.layout().BytesPerChunk();
  KVTIER_RETURN_IF_ERROR(CheckChunkBuffers("Load", "destination", keys.size(), dsts, bytes));
  NamespaceCounters& c = namespaces_.For(ns.id());
  ScopedLatency timer(&load_latency_, &c.load_latency);
  loads_.fetch_add(1, std::memory_order_relaxed);
  c.loads.fetch_add(1, std::memory_order_relaxed);
  std::vector<ChunkId> ids;
  ids.reserve(keys.size());
  for (const ChunkKey& k : keys) ids.push_back(ChunkId::Of(ns, k));
  std::vector<int> from = LeadingHolders(ids, /*assume_last=*/true);
  ids.resize(from.size());
  std::vector<bool> read(ids.size(), false);
  std::vector<std::unique_ptr<ChunkLanding>> landing;
  if (progress != nullptr) {
    landing.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) landing.push_back(std::make_unique<ChunkLanding>(progress, i));
  }
  std::vector<std::vector<ByteRange>> skip = PlanWindowSkips(ns.layout(), ids.size());
  size_t n = ReadPlanned(ids, dsts.first(ids.size()), from, read, landing, skip);
  n = ReadShortPrefixWindows(ns.layout(), ids, dsts.first(ids.size()), from, read, skip, n);
  // Past the loaded prefix nothing is reported loaded: leave no bytes of a partly read batch there
  // (a chunk no tier had was not written to).
  for (size_t i = n; i < ids.size(); ++i) {
    if (!read[i]) continue;
    for (const auto& piece : dsts[i]) {
      if (!piece.empty()) std::memset(piece.data(), 0, piece.size());
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (from[i] > 0 && options_.promote_on_load) Promote(ids[i], from[i], bytes, ns.layout().tokens_per_chunk);
    if (seen_ && background_mask_ != 0 && seen_->NoteUse(keys[i])) {
      // Read back from the tier that served it: no copy here.
      EnqueueSave(ids[i], {}, bytes, from[i], ns.layout().tokens_per_chunk);
    }
  }
  load_chunks_.fetch_add(n, std::memory_order_relaxed);
  load_bytes_.fetch_add(n * bytes, std::memory_order_relaxed);
  for (size_t i = 0; i < n && !skip.empty(); ++i) {
    load_bytes_skipped_.fetch_add(internal::RangeBytes(skip[i]), std::memory_order_relaxed);
  }
  c.load_chunks.fetch_add(n, std::memory_order_relaxed);
  c.load_bytes.fetch_add(n * bytes, std::memory_order_relaxed);
  return n;
}

void StoreImpl::Promote(const ChunkId& id, int from, uint64_t bytes, uint32_t tokens) {
  // The caller's buffers are theirs again once Load returns, so the job reads the chunk back from the
  // tier that served it rather than keeping a copy taken here: Load pays nothing for promotion.
  SaveJob job;
  job.id = id;
  job.bytes = bytes;
  job.source_tier = from;
  job.target_tiers = 1;
  job.is_save = false;
  job.tokens_per_chunk = tokens;
  if (!queue_->TryPush(std::move(job))) promotions_dropped_.fetch_add(1, std::memory_order_relaxed);
}

Result<BorrowedChunk> StoreImpl::Borrow(const Namespace& ns, const ChunkKey& key) {
  const ChunkId id = ChunkId::Of(ns, key);
  Status first = Status::NotFound("no tier that lends chunks holds " + key.Hex());
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (!caps_[t].in_memory) continue;  // only memory tiers lend in place
    auto b = tiers_[t]->Borrow(id);
    if (b.ok() && b->size() != ns.layout().BytesPerChunk()) {
      // The lender verified the bytes it holds, but not against this layout: a stored length that
      // disagrees with the layout its header names is a forged or broken header (as in Load).
      const uint64_t got = b->size();
      b = Status::Corruption("");  // released before the chunk is removed
      tier_length_corrupt_[t].fetch_add(1, std::memory_order_relaxed);
      (void)tiers_[t]->Remove(id);
      return Status::Corruption(tiers_[t]->url() + ": chunk " + key.Hex() + " holds " + std::to_string(got) +
                                " bytes where its layout has " + std::to_string(ns.layout().BytesPerChunk()) +
                                " (removed)");
    }
    if (b.ok()) {
      borrows_.fetch_add(1, std::memory_order_relaxed);
      return b;
    }
    if (b.status().IsCorruption()) return b.status();
    if (first.IsNotFound() && !b.status().IsNotFound() && b.status().code() != Code::kNotSupported) first = b.status();
  }
  return first;
}

Status StoreImpl::Flush() {
  queue_->Drain();
  Status first;
  for (auto& t : tiers_) {
    Status s = t->Flush();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

StoreStats StoreImpl::Stats() const {
  StoreStats s;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    s.tiers.push_back(tiers_[t]->Stats());
    s.tiers.back().dropped_saves = tier_dropped_[t].load(std::memory_order_relaxed);
    s.tiers.back().corrupt += tier_length_corrupt_[t].load(std::memory_order_relaxed);
  }
  s.lookups = lookups_.load(std::memory_order_relaxed);
  s.lookup_chunks_hit = lookup_hit_.load(std::memory_order_relaxed);
  s.lookup_chunks_missed = lookup_missed_.load(std::memory_order_relaxed);
  s.loads = loads_.load(std::memory_order_relaxed);
  s.load_chunks = load_chunks_.load(std::memory_order_relaxed);
  s.load_bytes = load_bytes_.load(std::memory_order_relaxed);
  s.load_bytes_skipped = load_bytes_skipped_.load(std::memory_order_relaxed);
  s.saves = saves_.load(std::memory_order_relaxed);
  s.save_chunks = save_chunks_.load(std::memory_order_relaxed);
  s.promotions = promotions_.load(std::memory_order_relaxed);
  s.promotions_dropped = promotions_dropped_.load(std::memory_order_relaxed);
  s.borrows = borrows_.load(std::memory_order_relaxed);
  s.queued_saves = queued_saves_.load(std::memory_order_relaxed);
  s.dropped_saves = dropped_saves_.load(std::memory_order_relaxed);
  s.queue_bytes_now = queue_->bytes_now();
  s.queue_chunks_now = queue_->jobs_now();
  s.load_latency = load_latency_.Summary();
  s.save_latency = save_latency_.Summary();
  s.namespaces = namespaces_.Snapshot();
  FillEventStats(s);
  return s;
}

}  // namespace internal
}  // namespace kvtier
