#include "core/threads.h"

#include <atomic>

namespace kvtier::internal {
namespace {
std::atomic<int> g_limit{0};
}  // namespace

void SetThreadLimitForTesting(int max_threads_per_call) { g_limit.store(max_threads_per_call); }

bool ThreadRefusedForTesting(size_t index) {
  const int limit = g_limit.load(std::memory_order_relaxed);
  return limit > 0 && index >= static_cast<size_t>(limit);
}

}  // namespace kvtier::internal
