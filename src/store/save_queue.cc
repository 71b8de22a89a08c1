#include "store/save_queue.h"

#include <algorithm>

#include "core/threads.h"

namespace kvtier::internal {

SaveQueue::SaveQueue(uint64_t max_bytes, uint32_t max_jobs, uint32_t threads, RunFn run)
    : max_bytes_(max_bytes), max_jobs_(max_jobs), run_(std::move(run)) {
  status_ = StartThreads(&workers_, threads, [this] { WorkerLoop(); }, "the background save queue");
}

SaveQueue::~SaveQueue() {
  {
    MutexLock lock(mu_);
    stopping_ = true;  // workers finish what is queued, then exit
  }
  work_cv_.NotifyAll();
  for (auto& t : workers_) t.join();
}

bool SaveQueue::FitsLocked(uint64_t bytes) const {
  // A job larger than the byte bound alone is still accepted into an empty queue, so one huge chunk
  // is not dropped forever.
  if (jobs_.size() + running_ >= max_jobs_) return false;
  return bytes_ == 0 || bytes_ + bytes <= max_bytes_;
}

bool SaveQueue::HasRoom(uint64_t bytes) const {
  MutexLock lock(mu_);
  return !stopping_ && FitsLocked(bytes);
}

bool SaveQueue::TryPush(SaveJob&& job) {
  {
    MutexLock lock(mu_);
    if (stopping_ || !FitsLocked(job.bytes)) return false;
    bytes_ += job.bytes;
    jobs_.push_back(std::move(job));
  }
  work_cv_.NotifyOne();
  return true;
}

void SaveQueue::Drain() {
  MutexLock lock(mu_);
  while (!jobs_.empty() || running_ != 0) idle_cv_.Wait(mu_);
}

size_t SaveQueue::Withdraw(std::span<const ChunkId> ids) {
  const auto named = [&](const ChunkId& id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); };
  std::vector<SaveJob> withdrawn;  // destroyed after the lock: a held chunk's release locks its tier
  MutexLock lock(mu_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!named(it->id)) {
      ++it;
      continue;
    }
    bytes_ -= it->bytes;
    withdrawn.push_back(std::move(*it));
    it = jobs_.erase(it);
  }
  const size_t dropped = withdrawn.size();
  if (jobs_.empty() && running_ == 0) idle_cv_.NotifyAll();
  while (std::any_of(running_ids_.begin(), running_ids_.end(), named)) job_done_cv_.Wait(mu_);
  return dropped;
}

uint64_t SaveQueue::bytes_now() const {
  MutexLock lock(mu_);
  return bytes_;
}

uint64_t SaveQueue::jobs_now() const {
  MutexLock lock(mu_);
  return jobs_.size() + running_;
}

void SaveQueue::WorkerLoop() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stopping_ && jobs_.empty()) work_cv_.Wait(mu_);
    if (jobs_.empty()) return;  // stopping and drained
    SaveJob job = std::move(jobs_.front());
    jobs_.pop_front();
    ++running_;
    running_ids_.push_back(job.id);
    lock.Unlock();
    run_(job);
    const uint64_t bytes = job.bytes;
    const ChunkId id = job.id;
    job = SaveJob{};  // free a staged copy before taking the lock
    lock.Lock();
    --running_;
    running_ids_.erase(std::find(running_ids_.begin(), running_ids_.end(), id));
    job_done_cv_.NotifyAll();
    bytes_ -= bytes;
    if (jobs_.empty() && running_ == 0) idle_cv_.NotifyAll();
  }
}

}  // namespace kvtier::internal
