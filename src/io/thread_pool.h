// A fixed set of worker threads running queued tasks in FIFO order. The destructor finishes queued
// tasks, then joins. Schedule is thread-safe.
//
// When the OS refuses a thread, the pool starts none (status() says why) and Schedule runs each task
// on the caller's thread: an owner that checks status() reports the error; one that does not still
// works, never aborts.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"
#include "kvtier/status.h"

namespace kvtier::internal {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task) EXCLUDES(mu_);
  unsigned size() const { return static_cast<unsigned>(workers_.size()); }
  // OK, or the error of the thread the OS refused (the pool then has no workers).
  const Status& status() const { return status_; }

 private:
  void Work() EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
  Status status_;
};

}  // namespace kvtier::internal
