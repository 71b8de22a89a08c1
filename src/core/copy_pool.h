// CopyPool: a few helper threads that run the pieces of one batch of copies together with the caller,
// so a mem:// GetMany moves bytes on several cores instead of one.
//
// Run(n, fn) calls fn(0) ... fn(n-1), each exactly once, on the calling thread and on whichever
// helpers are free, and returns when every call has returned. Batches of several callers share the
// helpers (each batch is also worked on by its own caller, so none waits for another's to finish).
// fn must not throw.
//
// Thread-safety: Run may be called from many threads at once. The destructor joins the helpers;
// REQUIRES: no Run in progress.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"

namespace kvtier::internal {

class CopyPool {
 public:
  explicit CopyPool(unsigned helpers);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  void Run(size_t n, const std::function<void(size_t)>& fn) EXCLUDES(mu_);
  unsigned helpers() const { return static_cast<unsigned>(threads_.size()); }

 private:
  struct Batch {
    const std::function<void(size_t)>* fn = nullptr;
    size_t n = 0;
    std::atomic<size_t> next{0};  // next index to claim
    unsigned workers = 0;         // helpers inside this batch; guarded by mu_
  };
  static void Work(Batch* b);  // claims and runs indices until none is left
  void HelperLoop() EXCLUDES(mu_);

  Mutex mu_;
  CondVar work_cv_;  // a batch arrived, or stopping
  CondVar done_cv_;  // a helper left a batch
  std::deque<Batch*> batches_ GUARDED_BY(mu_);  // batches with indices perhaps left to claim
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::internal
