// Test tiers that wrap another tier: ForwardingTier forwards every call (a test overrides one), so
// fault injection is a few lines. The wrapped tier is shared so a test can inspect it after the Store
// that owns the wrapper is gone.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "kvtier/tier.h"

namespace kvtier::testing {

class ForwardingTier : public Tier {
 public:
  explicit ForwardingTier(std::shared_ptr<Tier> inner, bool in_memory = false)
      : inner_(std::move(inner)), in_memory_(in_memory) {}

  const std::string& url() const override { return inner_->url(); }
  // Reported as a slow tier by default, so the Store writes it through its background queue.
  TierCapabilities capabilities() const override {
    TierCapabilities c = inner_->capabilities();
    c.in_memory = in_memory_;
    return c;
  }
  bool Contains(const ChunkId& id) override { return inner_->Contains(id); }
  Status Put(const ChunkId& id, GatherList payload) override { return inner_->Put(id, payload); }
  Status Get(const ChunkId& id, ScatterList dst) override { return inner_->Get(id, dst); }
  void GetMany(std::span<ReadOp> ops) override { inner_->GetMany(ops); }
  Status Remove(const ChunkId& id) override { return inner_->Remove(id); }
  Status List(const std::function<bool(const ChunkInfo&)>& fn) override { return inner_->List(fn); }
  Status Check(const ChunkInfo& info) override { return inner_->Check(info); }
  Status Flush() override { return inner_->Flush(); }
  TierStats Stats() const override { return inner_->Stats(); }

 protected:
  std::shared_ptr<Tier> inner_;
  bool in_memory_;
};

// Put waits until Release() is called: a storage device that has stalled.
class BlockingTier : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;

  Status Put(const ChunkId& id, GatherList payload) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.wait(lock, [this] { return released_; });
      --waiting_;
    }
    return ForwardingTier::Put(id, payload);
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;  // guarded by mu_
  int waiting_ = 0;        // guarded by mu_
};

// Every Put fails with an I/O error.
class FailingPutTier : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;
  Status Put(const ChunkId&, GatherList) override { return Status::IOError("injected write failure"); }
};

}  // namespace kvtier::testing
