// The annotated Mutex, MutexLock and CondVar (core/thread_annotations.h) at run time. That misuse is
// refused at compile time is shown by the thread_safety.* tests (thread_safety_misuse.cc).
#include "core/thread_annotations.h"

#include <gtest/gtest.h>

#include <deque>
#include <thread>
#include <vector>

namespace kvtier::internal {
namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 20000;

class Tally {
 public:
  void Add(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    AddLocked(n);
  }
  int total() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return total_;
  }

 private:
  void AddLocked(int n) REQUIRES(mu_) {
    mu_.AssertHeld();
    const int before = total_;  // a read and a write apart: lost updates show without mutual exclusion
    total_ = before + n;
  }

  mutable Mutex mu_;
  int total_ GUARDED_BY(mu_) = 0;
};

TEST(ThreadAnnotationsTest, MutexLockExcludesOtherThreads) {
  Tally tally;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) tally.Add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(tally.total(), kThreads * kRounds);
}

// A one-slot hand-off: each side waits for its turn, so every step needs Wait to sleep, release the
// mutex, and hold it again on return.
class PingPong {
 public:
  void Play(int me, int turns) EXCLUDES(mu_) {
    for (int i = 0; i < turns; ++i) {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [&]() REQUIRES(mu_) { return turn_ == me; });
      log_.push_back(me);
      turn_ = 1 - me;
      cv_.NotifyAll();
    }
  }
  std::deque<int> log() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return log_;
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  int turn_ GUARDED_BY(mu_) = 0;
  std::deque<int> log_ GUARDED_BY(mu_);
};

TEST(ThreadAnnotationsTest, CondVarWaitWithPredicateAlternates) {
  PingPong game;
  constexpr int kTurns = 500;
  std::thread one([&] { game.Play(1, kTurns); });
  game.Play(0, kTurns);
  one.join();
  const std::deque<int> log = game.log();
  ASSERT_EQ(log.size(), size_t{2 * kTurns});
  for (size_t i = 0; i < log.size(); ++i) EXPECT_EQ(log[i], static_cast<int>(i % 2)) << i;
}

// Waiters blocked in the plain Wait loop all wake on one NotifyAll.
TEST(ThreadAnnotationsTest, NotifyAllWakesEveryWaiter) {
  Mutex mu;
  CondVar cv;
  bool go = false;
  int waiting = 0, woke = 0;
  std::vector<std::thread> waiters;
  for (int t = 0; t < kThreads; ++t) {
    waiters.emplace_back([&] {
      MutexLock lock(mu);
      ++waiting;
      cv.NotifyAll();
      while (!go) cv.Wait(mu);
      ++woke;
    });
  }
  {
    MutexLock lock(mu);
    while (waiting < kThreads) cv.Wait(mu);  // every waiter is inside its Wait loop now
    EXPECT_EQ(woke, 0);
    go = true;
  }
  cv.NotifyAll();
  for (auto& t : waiters) t.join();
  MutexLock lock(mu);
  EXPECT_EQ(woke, kThreads);
}

// MutexLock::Unlock lets another thread in; Lock takes the mutex back for the rest of the scope, and
// the destructor releases only what is held. A mistake here deadlocks (the test times out).
TEST(ThreadAnnotationsTest, MutexLockUnlockAndRelock) {
  Mutex mu;
  int stage = 0;
  {
    MutexLock lock(mu);
    std::thread other([&] {
      MutexLock inner(mu);
      stage = 1;
    });
    lock.Unlock();
    other.join();  // returns only because the mutex was released
    lock.Lock();
    EXPECT_EQ(stage, 1);
    stage = 2;
  }
  {
    MutexLock lock(mu);  // the relocked scope released the mutex at its end
    EXPECT_EQ(stage, 2);
    lock.Unlock();       // released early: the destructor must not release again
  }
  std::thread last([&] {
    MutexLock lock(mu);
    stage = 3;
  });
  last.join();
  EXPECT_EQ(stage, 3);
}

}  // namespace
}  // namespace kvtier::internal
