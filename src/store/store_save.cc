// The write side of StoreImpl: Save, Prefetch and the background jobs of the SaveQueue.
//
// Counting: a background save job covers one chunk for every slower tier. It counts once in
// queued_saves when it wrote the chunk to every tier that lacked it, and once in dropped_saves when the
// queue refused it or a write failed (a job that finds every tier already holding the chunk counts in
// neither, nor does a job withdrawn by Remove). TierStats::dropped_saves counts per tier.
//
// A queued save never loses its payload to the fast tier's eviction: it holds the chunk there
// (Tier::Hold, bounded by the tier to a quarter of its capacity) from queueing until its copy has read
// it, or, where the tier holds no more, carries a copy taken at queueing (bounded by the queue's bytes).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/chunk_io.h"
#include "store/store_impl.h"

namespace kvtier::internal {

Status StoreImpl::Save(const Namespace& ns, std::span<const ChunkKey> keys,
                       std::span<const GatherList> srcs) {
  const uint64_t bytes = ns.layout().BytesPerChunk();
  KVTIER_RETURN_IF_ERROR(CheckChunkBuffers("Save", "source", keys.size(), srcs, bytes));
  NamespaceCounters& c = namespaces_.For(ns.id());
  ScopedLatency timer(&save_latency_, &c.save_latency);
  saves_.fetch_add(1, std::memory_order_relaxed);
  save_chunks_.fetch_add(keys.size(), std::memory_order_relaxed);
  c.saves.fetch_add(1, std::memory_order_relaxed);
  c.save_chunks.fetch_add(keys.size(), std::memory_order_relaxed);
  if (ns.identity() != nullptr && !keys.empty() && !c.described.exchange(true, std::memory_order_relaxed)) {
    DescribeNamespace(ns);
  }
  Status first_error;
  for (size_t i = 0; i < keys.size(); ++i) {
    const ChunkId id = ChunkId::Of(ns, keys[i]);
    bool top_holds = false;
    for (size_t t = 0; t < tiers_.size(); ++t) {
      if (!caps_[t].in_memory) continue;
      // Put keeps one copy per key: no Contains needed (but for an observer's stored events)
      Status s = PutObserved(t, id, srcs[i], ns.layout().tokens_per_chunk);
      if (t == 0) {
        top_holds = s.ok();
        if (!s.ok() && first_error.ok()) first_error = s;
      } else if (!s.ok()) {
        dropped_saves_.fetch_add(1, std::memory_order_relaxed);
        tier_dropped_[t].fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (background_mask_ == 0) continue;
    if (seen_ && !seen_->NoteUse(keys[i])) continue;  // first use: not admitted to slow tiers yet
    EnqueueSave(id, srcs[i], bytes, top_holds ? 0 : -1, ns.layout().tokens_per_chunk);
  }
  return first_error;
}

void StoreImpl::DescribeNamespace(const Namespace& ns) {
  // Display only (kvtier inspect): a tier that cannot keep the description still stores the chunks.
  // One small file per namespace and process, written on the saving thread before its first chunk.
  for (const auto& tier : tiers_) (void)tier->DescribeNamespace(ns.id(), *ns.identity());
}

void StoreImpl::EnqueueSave(const ChunkId& id, GatherList src, uint64_t bytes, int source_tier,
                            uint32_t tokens) {
  SaveJob job;
  job.id = id;
  job.bytes = bytes;
  job.tokens_per_chunk = tokens;
  job.source_tier = source_tier;
  job.target_tiers = background_mask_;
  if (source_tier >= 0) job.target_tiers &= ~(uint64_t{1} << source_tier);
  if (job.target_tiers == 0) return;
  // Room first, so an overloaded queue costs the caller neither a hold nor a copy it would throw away.
  if (!queue_->HasRoom(bytes)) {
    dropped_saves_.fetch_add(1, std::memory_order_relaxed);
    CountDropped(job.target_tiers);
    return;
  }
  // The payload must survive the wait in the queue: held where the source tier stored it (which then
  // cannot evict it), else copied now (the source tier lends nothing, or holds its share already).
  if (source_tier >= 0) {
    auto held = tiers_[static_cast<size_t>(source_tier)]->Hold(id);
    if (held.ok() && held->size() == bytes) job.held = std::move(held).value();
  }
  if (!job.held.held()) {
    job.staged.reserve(bytes);
    for (const auto& piece : src) job.staged.insert(job.staged.end(), piece.begin(), piece.end());
  }
  const uint64_t targets = job.target_tiers;
  if (!queue_->TryPush(std::move(job))) {
    dropped_saves_.fetch_add(1, std::memory_order_relaxed);
    CountDropped(targets);
  }
}

Status StoreImpl::Remove(const Namespace& ns, std::span<const ChunkKey> keys) {
  std::vector<ChunkId> ids;
  ids.reserve(keys.size());
  for (const ChunkKey& key : keys) ids.push_back(ChunkId::Of(ns, key));
  // First the background writes of these chunks, then the tiers: a write queued before the removal
  // and run after it would store the chunk again.
  queue_->Withdraw(ids);
  Status first_error;
  for (const auto& tier : tiers_) {
    const size_t t = static_cast<size_t>(&tier - tiers_.data());
    for (const ChunkId& id : ids) {
      const bool had = Observing() && tier->Contains(id);
      Status s = tier->Remove(id);
      if (!s.ok() && first_error.ok()) first_error = s;
      if (s.ok() && had) Emit(ChunkEventKind::kRemoved, id, t);
    }
  }
  return first_error;
}

void StoreImpl::CountDropped(uint64_t tier_mask) {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (tier_mask >> t & 1) tier_dropped_[t].fetch_add(1, std::memory_order_relaxed);
  }
}

bool StoreImpl::CanLend(const SaveJob& job) const {
  // Each worker pins at most one chunk; together they may pin a quarter of the source tier, so the
  // pins never leave a Save without room (the rest stays evictable). A tier of unknown capacity copies.
  const uint64_t capacity = lend_capacity_[static_cast<size_t>(job.source_tier)];
  return capacity > 0 && job.bytes * options_.background_threads <= capacity / kLendShare;
}

namespace {

// The background worker's own 4 KiB aligned buffer of at least `bytes`, reused (no allocation per job),
// so file:// can write it with O_DIRECT; empty when it cannot be had.
std::span<std::byte> WorkerBuffer(uint64_t bytes) {
  thread_local AlignedBuffer buffer;
  if (buffer.size() < bytes) buffer = AlignedBuffer::Allocate(std::max<uint64_t>(bytes, kChunkAlign));
  if (buffer.data() == nullptr) return {};
  return buffer.span().first(bytes);
}

}  // namespace

Status StoreImpl::LentPieces(BorrowedChunk view, BorrowedChunk* lent,
                             std::vector<std::span<const std::byte>>* pieces) {
  if (DirectWritable(view.pieces())) {  // file:// and fs:// write it with O_DIRECT
    *lent = std::move(view);
    pieces->assign(lent->pieces().begin(), lent->pieces().end());
    return Status::OK();
  }
  // Lent, but not where O_DIRECT can write from: copied out of the view (one read of the tier).
  const std::span<std::byte> buffer = WorkerBuffer(view.size());
  if (buffer.empty()) return Status::IOError("out of memory for a background write", true);
  size_t at = 0;
  for (std::span<const std::byte> piece : view.pieces()) {
    std::memcpy(buffer.data() + at, piece.data(), piece.size());
    at += piece.size();
  }
  *pieces = {std::span<const std::byte>(buffer)};
  return Status::OK();
}

Status StoreImpl::SourcePieces(SaveJob& job, BorrowedChunk* lent,
                               std::vector<std::span<const std::byte>>* pieces) {
  if (job.held.held()) return LentPieces(std::move(job.held), lent, pieces);
  if (job.is_save) {  // a save holds its chunk or carries a copy (EnqueueSave)
    *pieces = {std::span<const std::byte>(job.staged)};
    return Status::OK();
  }
  Tier& source = *tiers_[job.source_tier];
  if (CanLend(job)) {
    auto borrowed = source.Borrow(job.id);
    if (borrowed.ok() && borrowed->size() == job.bytes) return LentPieces(std::move(borrowed).value(), lent, pieces);
    // Evicted or damaged since the Save: the chunk is gone (the tier counted the miss once).
    if (!borrowed.ok() && borrowed.status().code() != Code::kNotSupported) return borrowed.status();
  }
  // Copied rather than lent: a pin would hold a small source tier's memory for the whole write.
  const std::span<std::byte> buffer = WorkerBuffer(job.bytes);
  if (buffer.empty()) return Status::IOError("out of memory for a background write", true);
  const std::span<std::byte> dst[] = {buffer};
  KVTIER_RETURN_IF_ERROR(source.Get(job.id, dst));
  *pieces = {std::span<const std::byte>(buffer)};
  return Status::OK();
}

void StoreImpl::RunJob(SaveJob& job) {
  // Tiers that already hold the chunk are skipped before anything is read back.
  uint64_t targets = 0;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const bool wanted = (job.target_tiers >> t & 1) && static_cast<int>(t) != job.source_tier;
    if (wanted && !tiers_[t]->Contains(job.id)) targets |= uint64_t{1} << t;
  }
  if (targets == 0) return;
  // The payload comes from the job's staged copy, from the source tier's own memory (held or lent:
  // pinned until the writes end, no copy) or from a copy of it into the worker's buffer.
  std::vector<std::span<const std::byte>> pieces;
  BorrowedChunk lent;
  if (!SourcePieces(job, &lent, &pieces).ok()) {  // a promotion's source evicted (or damaged) before now
    if (job.is_save) {
      dropped_saves_.fetch_add(1, std::memory_order_relaxed);
      CountDropped(targets);
    } else {
      promotions_dropped_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  bool failed = false;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (!(targets >> t & 1)) continue;
    const Status s = PutObserved(t, job.id, pieces, job.tokens_per_chunk);
    if (!s.ok()) {
      failed = true;
      if (job.is_save) tier_dropped_[t].fetch_add(1, std::memory_order_relaxed);
    } else if (!job.is_save) {
      promotions_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (!job.is_save) return;
  (failed ? dropped_saves_ : queued_saves_).fetch_add(1, std::memory_order_relaxed);
}

void StoreImpl::Prefetch(const Namespace& ns, std::span<const ChunkKey> keys) {
  if (tiers_.size() < 2) return;
  const uint64_t bytes = ns.layout().BytesPerChunk();
  for (const ChunkKey& key : keys) {
    const ChunkId id = ChunkId::Of(ns, key);
    const int t = FirstHolder(id, 0);
    if (t < 0) return;  // the prefix ends here
    if (t == 0) continue;
    SaveJob job;
    job.id = id;
    job.bytes = bytes;
    job.source_tier = t;
    job.target_tiers = 1;
    job.is_save = false;
    job.tokens_per_chunk = ns.layout().tokens_per_chunk;
    if (!queue_->TryPush(std::move(job))) return;  // best effort: a busy queue skips the rest
  }
}

}  // namespace kvtier::internal
