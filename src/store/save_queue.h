// SaveQueue: the bounded background work queue of a Store. Jobs copy chunks down to slower tiers (or up,
// for promotion and prefetch) on a fixed set of worker threads.
//
// The bound is in jobs and in bytes; TryPush never waits: when a job would exceed either bound it is
// refused and the caller counts the drop. A job's bytes stay counted until it has run.
//
// Thread-safety: every method may be called from many threads. The destructor drains the queue and
// joins the workers; the run function must not push into the same queue from a worker when that could
// wait on itself (TryPush never waits, so it is safe).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

// One chunk to copy between tiers.
struct SaveJob {
  ChunkId id;
  uint64_t bytes = 0;             // payload size (counted against the queue's byte bound)
  int source_tier = -1;           // the tier the payload is in (not a target); -1: none
  std::vector<std::byte> staged;  // a save's copy taken on the caller's thread when no tier holds it
  BorrowedChunk held;             // or the chunk held in the source tier from queueing to the copy
  uint64_t target_tiers = 0;      // bit t set: write to tier t unless it already holds the chunk
  bool is_save = true;            // a save (counted as queued or dropped) rather than a promotion
  uint32_t tokens_per_chunk = 0;  // the namespace's chunk size, for the stored events
};

class SaveQueue {
 public:
  using RunFn = std::function<void(SaveJob& job)>;

  // REQUIRES: threads >= 1.
  SaveQueue(uint64_t max_bytes, uint32_t max_jobs, uint32_t threads, RunFn run);
  ~SaveQueue();
  const Status& status() const { return status_; }
  SaveQueue(const SaveQueue&) = delete;
  SaveQueue& operator=(const SaveQueue&) = delete;

  // True when a job of `bytes` would be accepted now (a cheap check before staging a copy; TryPush
  // still decides).
  bool HasRoom(uint64_t bytes) const EXCLUDES(mu_);
  // Queues the job, or returns false (and drops it) when the queue is full. Never waits.
  bool TryPush(SaveJob&& job) EXCLUDES(mu_);
  // Waits until the queue is empty and no job runs (every job pushed before the call has run).
  void Drain() EXCLUDES(mu_);
  // Drops the queued jobs of any chunk of `ids` and waits until no running job is for one of them, so a
  // removal that follows cannot be undone by a write queued before it. Returns the jobs dropped.
  size_t Withdraw(std::span<const ChunkId> ids) EXCLUDES(mu_);
  uint64_t bytes_now() const EXCLUDES(mu_);  // of queued and running jobs
  uint64_t jobs_now() const EXCLUDES(mu_);   // queued and running jobs

 private:
  bool FitsLocked(uint64_t bytes) const REQUIRES(mu_);
  void WorkerLoop() EXCLUDES(mu_);

  const uint64_t max_bytes_;
  const uint32_t max_jobs_;
  const RunFn run_;
  mutable Mutex mu_;
  CondVar work_cv_;  // a job arrived or stopping
  CondVar idle_cv_;  // the queue emptied and no job runs
  CondVar job_done_cv_;  // a running job ended (Withdraw waits on it)
  std::deque<SaveJob> jobs_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;  // queued and running jobs
  uint32_t running_ GUARDED_BY(mu_) = 0;
  std::vector<ChunkId> running_ids_ GUARDED_BY(mu_);  // chunks of the running jobs (one per worker)
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
  Status status_;  // OK, or why a worker could not start (the Store then fails to open)
};

}  // namespace kvtier::internal
