// Test tiers that wrap another tier: ForwardingTier forwards every call (a test overrides one), so
// fault injection is a few lines. The wrapped tier is shared so a test can inspect it after the Store
// that owns the wrapper is gone.
#pragma once

#include <memory>
#include <string>

#include "core/thread_annotations.h"
#include "kvtier/forwarding_tier.h"
#include "kvtier/tier.h"

namespace kvtier::testing {

// A forwarding tier that reports itself as slow (not in memory) by default, so the Store writes it
// through its background queue.
class ForwardingTier : public kvtier::ForwardingTier {
 public:
  explicit ForwardingTier(std::shared_ptr<Tier> inner, bool in_memory = false)
      : kvtier::ForwardingTier(std::move(inner)), in_memory_(in_memory) {}

  TierCapabilities capabilities() const override {
    TierCapabilities c = inner_->capabilities();
    c.in_memory = in_memory_;
    return c;
  }

 protected:
  bool in_memory_;
};

// Put waits until Release() is called: a storage device that has stalled.
class BlockingTier : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;

  Status Put(const ChunkId& id, GatherList payload) override {
    {
      internal::MutexLock lock(mu_);
      ++waiting_;
      cv_.NotifyAll();  // WaitForWaiter
      while (!released_) cv_.Wait(mu_);
      --waiting_;
    }
    return ForwardingTier::Put(id, payload);
  }
  void Release() {
    internal::MutexLock lock(mu_);
    released_ = true;
    cv_.NotifyAll();
  }
  // Returns once some Put is held at the gate.
  void WaitForWaiter() {
    internal::MutexLock lock(mu_);
    while (waiting_ == 0 && !released_) cv_.Wait(mu_);
  }

 private:
  internal::Mutex mu_;
  internal::CondVar cv_;
  bool released_ GUARDED_BY(mu_) = false;
  int waiting_ GUARDED_BY(mu_) = 0;
};

// Every Put fails with an I/O error.
class FailingPutTier : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;
  Status Put(const ChunkId&, GatherList) override { return Status::IOError("injected write failure"); }
};

}  // namespace kvtier::testing
