// Starting threads without aborting. std::thread's constructor throws std::system_error when the OS
// refuses a thread (EAGAIN under RLIMIT_NPROC, a cgroup pids limit or an address-space limit); thrown
// out of a constructor that already started others, it destroys joinable threads and the process
// aborts. Every thread kvtier starts goes through these two functions instead:
//   * StartThreads for the long-lived workers of a pool: a refusal is a Status (IOError, retryable,
//     naming what wanted the thread) and the threads already started stay for the caller to join;
//   * TryStartThread for a helper that shares work with its caller: false when refused, and the
//     caller does that share itself.
#pragma once

#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

// Test hook: when set above 0, thread `n` and later of every StartThreads/TryStartThread call in this
// process is refused as the OS would refuse it (for tests that cannot lower RLIMIT_NPROC as root).
void SetThreadLimitForTesting(int max_threads_per_call);
bool ThreadRefusedForTesting(size_t index);

template <class F>
bool TryStartThread(std::vector<std::thread>* threads, F&& body) {
  if (ThreadRefusedForTesting(threads->size())) return false;
  try {
    threads->emplace_back(std::forward<F>(body));
    return true;
  } catch (const std::system_error&) {
    return false;
  }
}

template <class F>
Status StartThreads(std::vector<std::thread>* threads, unsigned n, const F& body, std::string_view what) {
  threads->reserve(threads->size() + n);
  for (unsigned i = 0; i < n; ++i) {
    if (ThreadRefusedForTesting(threads->size())) {
      return Status::IOError("cannot start thread " + std::to_string(i + 1) + " of " + std::to_string(n) +
                                 " for " + std::string(what) + ": Resource temporarily unavailable",
                             true);
    }
    try {
      threads->emplace_back(body);
    } catch (const std::system_error& e) {
      return Status::IOError("cannot start thread " + std::to_string(i + 1) + " of " + std::to_string(n) +
                                 " for " + std::string(what) + ": " + e.code().message(),
                             true);
    }
  }
  return Status::OK();
}

}  // namespace kvtier::internal
