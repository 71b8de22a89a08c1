// A counting semaphore over bytes: bounds the bytes a reader has in flight (read but not yet verified
// and copied out), whatever the number of threads or calls. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace kvtier::internal {

class ByteBudget {
 public:
  explicit ByteBudget(uint64_t limit) : limit_(limit == 0 ? 1 : limit) {}

  // Blocks until `n` bytes fit. A request larger than the whole budget is admitted once nothing else
  // is in flight, so an oversized chunk is slow rather than stuck.
  // REQUIRES: the caller holds no bytes of this budget (else two callers could wait on each other).
  void Acquire(uint64_t n);
  // Takes `n` bytes if they fit now.
  bool TryAcquire(uint64_t n);
  void Release(uint64_t n);

  uint64_t limit() const { return limit_; }
  uint64_t used() const;

 private:
  bool Fits(uint64_t n) const { return used_ == 0 || used_ + n <= limit_; }

  const uint64_t limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t used_ = 0;  // guarded by mu_
};

}  // namespace kvtier::internal
