// Retries of object operations: a retryable failure (Status::retryable()) is tried again after an
// exponential backoff with full jitter, up to RetryPolicy::retries more times and within
// RetryPolicy::budget of time; then its error stands. NotFound, NoSpace (a full store does not empty
// itself in milliseconds: the put is dropped at once) and other errors are final at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <thread>
#include <vector>

#include "tiers/object/object_options.h"

namespace kvtier::object {

// The delay before retry `attempt` (0 = the first retry): uniform in [0, backoff * 2^attempt], capped
// at one budget.
std::chrono::milliseconds BackoffDelay(const RetryPolicy& policy, uint32_t attempt);

inline bool ShouldRetry(const Status& s) { return !s.ok() && s.retryable() && !s.IsNoSpace(); }

struct RetryCounts {
  uint64_t retried_ops = 0;  // op tries after the first
  uint64_t gave_up = 0;      // ops still failing with a retryable error when retries ran out
};

// Runs `run` over `ops`, then again over the ops whose status is retryable, until none are or the
// policy is spent. `run` sets every op's status; ops are moved into a smaller batch for each retry
// and back. Op is ObjectRead or ObjectWrite.
template <typename Op>
RetryCounts RunWithRetries(std::span<Op> ops, const RetryPolicy& policy, const std::function<void(std::span<Op>)>& run) {
  RetryCounts counts;
  run(ops);
  const auto start = std::chrono::steady_clock::now();
  std::chrono::milliseconds slept{0};
  std::vector<size_t> pending;
  for (uint32_t attempt = 0;; ++attempt) {
    pending.clear();
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ShouldRetry(ops[i].status)) pending.push_back(i);
    }
    if (pending.empty()) break;
    const auto delay = BackoffDelay(policy, attempt);
    const auto spent = std::max(slept, std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - start));
    if (attempt >= policy.retries || spent + delay > policy.budget) {
      counts.gave_up += pending.size();
      break;
    }
    if (policy.sleep) {
      policy.sleep(delay);
    } else {
      std::this_thread::sleep_for(delay);
    }
    slept += delay;
    std::vector<Op> again;
    again.reserve(pending.size());
    for (size_t i : pending) again.push_back(std::move(ops[i]));
    run(std::span<Op>(again));
    for (size_t k = 0; k < pending.size(); ++k) ops[pending[k]] = std::move(again[k]);
    counts.retried_ops += pending.size();
  }
  return counts;
}

}  // namespace kvtier::object
