#include "io/byte_budget.h"

namespace kvtier::internal {

void ByteBudget::Acquire(uint64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return Fits(n); });
  used_ += n;
}

bool ByteBudget::TryAcquire(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Fits(n)) return false;
  used_ += n;
  return true;
}

void ByteBudget::Release(uint64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    used_ -= n;
  }
  cv_.notify_all();
}

uint64_t ByteBudget::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace kvtier::internal
