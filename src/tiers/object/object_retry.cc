#include "tiers/object/object_retry.h"

#include <algorithm>
#include <random>

namespace kvtier::object {

std::chrono::milliseconds BackoffDelay(const RetryPolicy& policy, uint32_t attempt) {
  const uint64_t base = static_cast<uint64_t>(policy.backoff.count());
  const uint64_t cap = static_cast<uint64_t>(policy.budget.count());
  const uint64_t top = std::min<uint64_t>(cap, attempt >= 32 ? cap : base << attempt);
  if (top == 0) return std::chrono::milliseconds(0);
  thread_local std::minstd_rand rng{std::random_device{}()};
  return std::chrono::milliseconds(std::uniform_int_distribution<uint64_t>(0, top)(rng));
}

}  // namespace kvtier::object
