#include "replay/no_sync_tier.h"

namespace kvtier::internal {
namespace {

class NoSyncTier final : public Tier {
 public:
  explicit NoSyncTier(std::unique_ptr<Tier> base) : base_(std::move(base)) {}

  const std::string& url() const override { return base_->url(); }
  TierCapabilities capabilities() const override { return base_->capabilities(); }
  bool Contains(const ChunkId& id) override { return base_->Contains(id); }
  Status Put(const ChunkId& id, GatherList payload) override { return base_->Put(id, payload); }
  Status Get(const ChunkId& id, ScatterList dst) override { return base_->Get(id, dst); }
  void GetMany(std::span<ReadOp> ops) override { base_->GetMany(ops); }
  Status Remove(const ChunkId& id) override { return base_->Remove(id); }
  Status List(const std::function<bool(const ChunkInfo&)>& fn) override { return base_->List(fn); }
  Status Check(const ChunkInfo& info) override { return base_->Check(info); }
  Status Flush() override { return Status::OK(); }
  TierStats Stats() const override { return base_->Stats(); }

 private:
  const std::unique_ptr<Tier> base_;
};

}  // namespace

std::unique_ptr<Tier> WrapWithoutSync(std::unique_ptr<Tier> tier) {
  return std::make_unique<NoSyncTier>(std::move(tier));
}

}  // namespace kvtier::internal
