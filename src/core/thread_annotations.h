// Compiler-checked locking: Clang's thread-safety attributes, and a mutex, a scoped lock and a
// condition variable that carry them.
//
// A member written `T x GUARDED_BY(mu_);` may only be read or written while `mu_` is held; a function
// declared `void F() REQUIRES(mu_);` may only be called with `mu_` held, and one declared EXCLUDES(mu_)
// only without it. Clang checks this at compile time under -Wthread-safety (`make check-locking`); on
// other compilers the macros expand to nothing. libstdc++'s std::mutex carries no attributes, which is
// why kvtier locks through Mutex / MutexLock below.
//
// Thread-safety: Mutex and CondVar are shared between threads; a MutexLock belongs to one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION(x)
#endif

#ifndef CAPABILITY
#define CAPABILITY(name) KVTIER_THREAD_ANNOTATION(capability(name))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY KVTIER_THREAD_ANNOTATION(scoped_lockable)
#endif
#ifndef GUARDED_BY
#define GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) KVTIER_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) KVTIER_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#endif
#ifndef REQUIRES
#define REQUIRES(...) KVTIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) KVTIER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) KVTIER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) KVTIER_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) KVTIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) KVTIER_THREAD_ANNOTATION(assert_capability(x))
#endif
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) KVTIER_THREAD_ANNOTATION(lock_returned(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS KVTIER_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

namespace kvtier::internal {

class CondVar;

// A std::mutex that the analysis knows as a capability.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis (not the program) that the calling thread holds the mutex.
  void AssertHeld() ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction; Unlock() and Lock() release and retake it in between
// (the destructor releases it only when held).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    held_ = false;
    mu_.Unlock();
  }
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable for Mutex. Wait releases `mu` while blocked and holds it again on return; like
// every condition variable it may wake without a notify, so callers wait in a loop on their condition:
//   while (!ready_) cv_.Wait(mu_);
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);  // the caller's hold, borrowed
    cv_.wait(lock);
    lock.release();  // still held: it stays the caller's
  }
  // Like Wait, but returns false once `deadline` has passed (true when woken before it).
  bool WaitUntil(Mutex& mu, std::chrono::steady_clock::time_point deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  // Waits until `done()` is true, tested with `mu` held. A lambda does not see its caller's locks, so
  // one that reads guarded state says what it needs: cv_.Wait(mu_, [&]() REQUIRES(mu_) { ... });
  // (the analysis cannot match that to `mu` here, so this one body is left unchecked).
  template <typename Pred>
  void Wait(Mutex& mu, Pred done) REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!done()) Wait(mu);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace kvtier::internal
