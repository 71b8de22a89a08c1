// Compiled (never linked) by ctest with clang's -Wthread-safety as an error, once per KVTIER_MISUSE
// value: 0 holds every lock it needs and must compile; each other value breaks one locking rule and
// clang must refuse it with the message the test expects. Proof that the analysis really runs.
#include "core/thread_annotations.h"

namespace kvtier::internal {

class Counter {
 public:
  int Read() {
#if KVTIER_MISUSE != 1
    MutexLock lock(mu_);
#endif
    return count_;  // 1: read without the lock
  }

  void Bump() {
#if KVTIER_MISUSE != 2
    MutexLock lock(mu_);
#endif
    BumpLocked();  // 2: a REQUIRES(mu_) helper called without the lock
  }

  void WaitPositive() {
#if KVTIER_MISUSE != 3
    MutexLock lock(mu_);
#endif
    cv_.Wait(mu_, [this]() REQUIRES(mu_) { return count_ > 0; });  // 3: wait without the lock
  }

  void Reset() {
    MutexLock lock(mu_);
#if KVTIER_MISUSE == 4
    lock.Unlock();
#endif
    count_ = 0;  // 4: written after the scoped lock was released
  }

 private:
  void BumpLocked() REQUIRES(mu_) {
    ++count_;
    cv_.NotifyAll();
  }

  Mutex mu_;
  CondVar cv_;
  int count_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::internal
