#include "core/copy_pool.h"

#include "core/threads.h"

#include <algorithm>

namespace kvtier::internal {

CopyPool::CopyPool(unsigned helpers) {
  // Helpers only share work the caller also does: when the OS refuses some, fewer help (none: the
  // caller copies alone).
  (void)StartThreads(&threads_, helpers, [this] { HelperLoop(); }, "memory copies");
}

CopyPool::~CopyPool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  work_cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void CopyPool::Work(Batch* b) {
  for (size_t i = b->next.fetch_add(1, std::memory_order_relaxed); i < b->n;
       i = b->next.fetch_add(1, std::memory_order_relaxed)) {
    (*b->fn)(i);
  }
}

void CopyPool::Run(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Batch batch;
  batch.fn = &fn;
  batch.n = n;
  {
    MutexLock lock(mu_);
    batches_.push_back(&batch);
  }
  work_cv_.NotifyAll();
  Work(&batch);
  // Every index is claimed; wait for the helpers still running theirs, after which none can enter
  // (they only enter batches still listed).
  MutexLock lock(mu_);
  auto it = std::find(batches_.begin(), batches_.end(), &batch);
  if (it != batches_.end()) batches_.erase(it);
  while (batch.workers > 0) done_cv_.Wait(mu_);
}

void CopyPool::HelperLoop() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stop_ && batches_.empty()) work_cv_.Wait(mu_);
    if (stop_) return;
    Batch* b = batches_.front();
    if (b->next.load(std::memory_order_relaxed) >= b->n) {  // all claimed: nothing for us here
      batches_.pop_front();
      continue;
    }
    ++b->workers;
    lock.Unlock();
    Work(b);
    lock.Lock();
    --b->workers;
    if (!batches_.empty() && batches_.front() == b) batches_.pop_front();
    done_cv_.NotifyAll();
  }
}

}  // namespace kvtier::internal
