#include "io/thread_pool.h"

#include "core/threads.h"

namespace kvtier::internal {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = 1;
  status_ = StartThreads(&workers_, threads, [this] { Work(); }, "a thread pool");
  if (!status_.ok()) {  // none at all rather than fewer than asked: see the header
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  if (workers_.empty()) {  // the pool could not start: run here
    task();
    return;
  }
  {
    MutexLock lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.NotifyOne();
}

void ThreadPool::Work() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      while (!stop_ && tasks_.empty()) cv_.Wait(mu_);
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kvtier::internal
