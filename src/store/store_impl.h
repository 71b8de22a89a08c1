// StoreImpl: the Store of include/kvtier/store.h over an ordered list of tiers. Private to src/store.
//
// Reads go to the fastest tier that holds a chunk (falling back to slower ones when a copy is bad);
// saves go synchronously into in-memory tiers and through a bounded SaveQueue into the others.
// Counters are atomics; the tiers and the queue synchronise themselves, so every method is thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/latency.h"
#include "kvtier/store.h"
#include "store/chunk_landing.h"
#include "store/namespace_table.h"
#include "store/save_queue.h"
#include "store/seen_table.h"

namespace kvtier::internal {

// InvalidArgument unless there is one buffer list per key and each holds exactly `chunk_bytes`.
// `op` and `what` name the call and its lists in the message ("Load", "destination").
template <typename BufferList>
Status CheckChunkBuffers(std::string_view op, std::string_view what, size_t keys,
                         std::span<const BufferList> lists, uint64_t chunk_bytes) {
  if (keys != lists.size()) {
    return Status::InvalidArgument(std::string(op) + ": " + std::to_string(keys) + " keys but " +
                                   std::to_string(lists.size()) + " " + std::string(what) + "s");
  }
  for (size_t i = 0; i < lists.size(); ++i) {
    if (TotalBytes(lists[i]) != chunk_bytes) {
      return Status::InvalidArgument(std::string(op) + ": " + std::string(what) + " " +
                                     std::to_string(i) + " holds " + std::to_string(TotalBytes(lists[i])) +
                                     " bytes, a chunk has " + std::to_string(chunk_bytes));
    }
  }
  return Status::OK();
}

class StoreImpl final : public Store {
 public:
  StoreImpl(std::vector<std::unique_ptr<Tier>> tiers, const StoreOptions& options);
  ~StoreImpl() override;
  // OK, or why a background thread could not start (Store::Open then fails with it).
  const Status& StartStatus() const { return queue_->status(); }

  size_t Lookup(const Namespace& ns, std::span<const ChunkKey> keys) override;
  Result<size_t> Load(const Namespace& ns, std::span<const ChunkKey> keys,
                      std::span<const ScatterList> dsts) override;
  Result<size_t> LoadWithProgress(const Namespace& ns, std::span<const ChunkKey> keys,
                                  std::span<const ScatterList> dsts, LoadProgress* progress) override;
  Status Save(const Namespace& ns, std::span<const ChunkKey> keys,
              std::span<const GatherList> srcs) override;
  Result<BorrowedChunk> Borrow(const Namespace& ns, const ChunkKey& key) override;
  void Prefetch(const Namespace& ns, std::span<const ChunkKey> keys) override;
  Status Remove(const Namespace& ns, std::span<const ChunkKey> keys) override;
  Status Flush() override;
  StoreStats Stats() const override;
  size_t tier_count() const override { return tiers_.size(); }
  Tier& tier(size_t index) override { return *tiers_[index]; }

 private:
  // Index of the first tier at or after `from` that holds the chunk, or -1.
  int FirstHolder(const ChunkId& id, size_t from) const;
  // The fastest tier holding each of the leading chunks of `ids`, asked a window at a time through
  // Tier::ContainsMany (one batched call per tier per window, not one per chunk), up to the first chunk
  // no tier holds. Returns the holders of that prefix. With `assume_last` (Load's plan) the last tier
  // is not asked: a chunk no faster tier holds is planned on it, and its read says whether it is
  // there, so Load costs that tier no presence round trip on top of the Lookup before it.
  std::vector<int> LeadingHolders(std::span<const ChunkId> ids, bool assume_last = false) const;
  // Reads every chunk of the plan from its tier, batched per tier; on failure retries slower tiers.
  // Returns the length of the prefix that was read; updates from[i] to the tier that served chunk i.
  // read[i] is set when a tier's read of chunk i got further than NotFound (its destination may hold
  // bytes: Load zeroes it unless it is loaded).
  // Removes a chunk whose stored length disagrees with its layout (the tier said InvalidArgument for
  // a destination Load had checked) and counts it corrupt in that tier's TierStats::corrupt.
  void RemoveIfLengthDisagrees(size_t tier, const ChunkId& id, const Status& st);
  // With `progress` (one tracker per chunk, or empty), each read reports its verified ranges there and
  // a chunk that fails after reporting some is not retried: the prefix ends before it.
  // With `skip` (per chunk, the window groups' ranges it need not read; or empty), a chunk whose tier
  // reads ranges (ReadsRanges) is read without them.
  size_t ReadPlanned(std::span<const ChunkId> ids, std::span<const ScatterList> dsts,
                     std::vector<int>& from, std::vector<bool>& read,
                     std::span<const std::unique_ptr<ChunkLanding>> progress = {},
                     std::span<const std::vector<ByteRange>> skip = {});
  // Sliding-window loads (store_window.cc). Whether tier t reads a chunk's ranges from storage rather
  // than the whole chunk: every tier not in memory (file:// reads only the pieces a range touches;
  // fs:// and the object tiers read whole chunks inside GetRanges, and still write fewer bytes). A
  // memory tier copies whole chunks: its check is one checksum of the whole chunk.
  bool ReadsRanges(int t) const { return !caps_[static_cast<size_t>(t)].in_memory; }
  // Per chunk of a load of `n` chunks of `layout`, the window groups' ranges it need not read
  // (internal::WindowSkippedRanges); empty when the layout has no window group.
  static std::vector<std::vector<ByteRange>> PlanWindowSkips(const Layout& layout, size_t n);
  // Reads chunk `id` from tier t into `dst`: all but `skip` where the tier reads ranges, whole
  // otherwise. Errors and `dst` as Tier::Get (a failed ranged read zeroes what it was to fill).
  Status ReadChunk(int t, const ChunkId& id, ScatterList dst, std::span<const ByteRange> skip);
  // ReadChunk of the chunks `which` (from their tiers `from`), on the caller's thread and a few helpers;
  // status[j] for which[j].
  void ReadRangedChunks(std::span<const size_t> which, std::span<const ChunkId> ids,
                        std::span<const ScatterList> dsts, std::span<const int> from,
                        std::span<const std::vector<ByteRange>> skip, std::vector<Status>& status);
  // After a load that ended at `loaded` chunks, short of the plan, the window bytes that the shorter
  // prefix needs and were skipped are read now (the ranges its window covers); a chunk whose read
  // fails ends the prefix there (its destination zeroed, read[i] set). Updates `skip` to what stays
  // unread and returns the prefix now loaded.
  size_t ReadShortPrefixWindows(const Layout& layout, std::span<const ChunkId> ids,
                                std::span<const ScatterList> dsts, std::span<const int> from,
                                std::vector<bool>& read, std::vector<std::vector<ByteRange>>& skip,
                                size_t loaded);
  // Queues a background copy of chunk `id` from tier `from` into the top tier; counts a drop when the
  // queue is full.
  void Promote(const ChunkId& id, int from, uint64_t bytes, uint32_t tokens);
  // Queues a copy of a chunk to the slower tiers; counts a drop when the queue is full.
  void EnqueueSave(const ChunkId& id, GatherList src, uint64_t bytes, int source_tier, uint32_t tokens);
  void RunJob(SaveJob& job);  // on a queue worker
  // A job's payload for its writes. A save's: the chunk its source tier holds for it (job.held, moved
  // to `lent`, pinned until the writes end) or its staged copy. A promotion's: the chunk in its source
  // tier, lent where that tier lends and is large enough (CanLend), otherwise read by Get. A lent view
  // is written from in place where O_DIRECT can write from it, else copied into the worker's buffer
  // (LentPieces). An error: a promotion's source left its tier (evicted or damaged) before the worker
  // got to it.
  bool CanLend(const SaveJob& job) const;
  Status SourcePieces(SaveJob& job, BorrowedChunk* lent, std::vector<std::span<const std::byte>>* pieces);
  Status LentPieces(BorrowedChunk view, BorrowedChunk* lent, std::vector<std::span<const std::byte>>* pieces);
  // Writes the namespace's identity beside its chunks in every tier that keeps one (first save).
  void DescribeNamespace(const Namespace& ns);
  void CountDropped(uint64_t tier_mask);  // one dropped chunk for each tier in the mask
  // Chunk events (StoreOptions::observer; store_events.cc). Observing() is false without an observer,
  // and then nothing is asked or told.
  bool Observing() const { return options_.observer != nullptr; }
  void Emit(ChunkEventKind kind, const ChunkId& id, size_t tier, uint32_t tokens_per_chunk = 0);
  // Put into tier t, telling the observer when the tier did not hold the chunk before.
  Status PutObserved(size_t t, const ChunkId& id, GatherList payload, uint32_t tokens_per_chunk);
  void ListenForEvictions();  // each tier's evictions become kEvicted events
  void StopListening();       // before the tiers outlive this Store (a wrapper's inner tier may)
  void FillEventStats(StoreStats& s) const;

  std::vector<std::unique_ptr<Tier>> tiers_;
  std::vector<TierCapabilities> caps_;
  std::vector<const char*> mediums_;  // per tier: ChunkEvent::medium
  std::atomic<uint64_t> events_{0};
  const StoreOptions options_;
  uint64_t background_mask_ = 0;  // bit t: tier t is written through the queue (not in memory)
  // Per tier: the capacity of an in-memory tier (0 for others and unknown): the background writers pin
  // at most 1/kLendShare of it while they write lent chunks (CanLend).
  std::vector<uint64_t> lend_capacity_;
  static constexpr uint64_t kLendShare = 4;
  std::unique_ptr<SeenTable> seen_;  // only for Admission::kSecondUse

  std::atomic<uint64_t> lookups_{0}, lookup_hit_{0}, lookup_missed_{0}, loads_{0}, load_chunks_{0},
      load_bytes_{0}, load_bytes_skipped_{0}, saves_{0}, save_chunks_{0}, promotions_{0}, promotions_dropped_{0}, borrows_{0},
      queued_saves_{0}, dropped_saves_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> tier_dropped_;  // per tier: TierStats::dropped_saves
  // Per tier: chunks the Store found with a length that disagrees with their layout (and removed);
  // added to the tier's own TierStats::corrupt, so both kinds of corruption count in one place.
  std::unique_ptr<std::atomic<uint64_t>[]> tier_length_corrupt_;
  LatencyHistogram load_latency_, save_latency_;
  NamespaceTable namespaces_;
  // Last member: destroyed (drained, workers joined) before the tiers it writes to.
  std::unique_ptr<SaveQueue> queue_;
};

}  // namespace kvtier::internal
