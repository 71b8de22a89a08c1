// A fixed set of worker threads running queued tasks in FIFO order. The destructor finishes queued
// tasks, then joins. Schedule is thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"

namespace kvtier::internal {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task) EXCLUDES(mu_);
  unsigned size() const { return static_cast<unsigned>(workers_.size()); }

 private:
  void Work() EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvtier::internal
