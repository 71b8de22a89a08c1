// A counting semaphore over bytes: bounds the bytes a reader has in flight (read but not yet verified
// and copied out), whatever the number of threads or calls. Thread-safe.
#pragma once

#include <cstdint>

#include "core/thread_annotations.h"

namespace kvtier::internal {

class ByteBudget {
 public:
  explicit ByteBudget(uint64_t limit) : limit_(limit == 0 ? 1 : limit) {}

  // Blocks until `n` bytes fit. A request larger than the whole budget is admitted once nothing else
  // is in flight, so an oversized chunk is slow rather than stuck.
  // REQUIRES: the caller holds no bytes of this budget (else two callers could wait on each other).
  void Acquire(uint64_t n) EXCLUDES(mu_);
  // Takes `n` bytes if they fit now.
  bool TryAcquire(uint64_t n) EXCLUDES(mu_);
  void Release(uint64_t n) EXCLUDES(mu_);

  uint64_t limit() const { return limit_; }
  uint64_t used() const EXCLUDES(mu_);

 private:
  bool Fits(uint64_t n) const REQUIRES(mu_) { return used_ == 0 || used_ + n <= limit_; }

  const uint64_t limit_;
  mutable Mutex mu_;
  CondVar cv_;
  uint64_t used_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::internal
