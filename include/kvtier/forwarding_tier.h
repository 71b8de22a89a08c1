// ForwardingTier: a Tier that passes every call to another tier. Derive from it and override the one
// call you want to change (skip Flush, inject a fault, add latency, count calls): a wrapper is then a
// few lines. ContainsMany, Borrow, Hold and HostRegions are deliberately not forwarded: the defaults go through
// this wrapper's Contains and lend nothing, so a wrapper that overrides Contains or Get is never bypassed.
// The wrapped tier is held by shared_ptr so a test can keep inspecting it after the Store
// that owns the wrapper is gone.
//
// Thread-safety: as the wrapped tier.
#pragma once

#include <memory>
#include <utility>

#include "kvtier/tier.h"

namespace kvtier {

class ForwardingTier : public Tier {
 public:
  // REQUIRES: inner != nullptr
  explicit ForwardingTier(std::shared_ptr<Tier> inner) : inner_(std::move(inner)) {}

  const std::string& url() const override { return inner_->url(); }
  TierCapabilities capabilities() const override { return inner_->capabilities(); }
  bool Contains(const ChunkId& id) override { return inner_->Contains(id); }
  Status Put(const ChunkId& id, GatherList payload) override { return inner_->Put(id, payload); }
  Status Get(const ChunkId& id, ScatterList dst) override { return inner_->Get(id, dst); }
  void GetMany(std::span<ReadOp> ops) override { inner_->GetMany(ops); }
  Status Remove(const ChunkId& id) override { return inner_->Remove(id); }
  Status List(const std::function<bool(const ChunkInfo&)>& fn) override { return inner_->List(fn); }
  Status Check(const ChunkInfo& info) override { return inner_->Check(info); }
  Status Flush() override { return inner_->Flush(); }
  TierStats Stats() const override { return inner_->Stats(); }
  Status DescribeNamespace(const Digest& ns, std::string_view text) override {
    return inner_->DescribeNamespace(ns, text);
  }
  Result<std::string> NamespaceDescription(const Digest& ns) override { return inner_->NamespaceDescription(ns); }
  void SetEvictionListener(EvictionListener listener) override { inner_->SetEvictionListener(std::move(listener)); }

  Tier& inner() const { return *inner_; }

 protected:
  std::shared_ptr<Tier> inner_;
};

}  // namespace kvtier
