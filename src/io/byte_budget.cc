#include "io/byte_budget.h"

namespace kvtier::internal {

void ByteBudget::Acquire(uint64_t n) {
  MutexLock lock(mu_);
  while (!Fits(n)) cv_.Wait(mu_);
  used_ += n;
}

bool ByteBudget::TryAcquire(uint64_t n) {
  MutexLock lock(mu_);
  if (!Fits(n)) return false;
  used_ += n;
  return true;
}

void ByteBudget::Release(uint64_t n) {
  {
    MutexLock lock(mu_);
    used_ -= n;
  }
  cv_.NotifyAll();
}

uint64_t ByteBudget::used() const {
  MutexLock lock(mu_);
  return used_;
}

}  // namespace kvtier::internal
