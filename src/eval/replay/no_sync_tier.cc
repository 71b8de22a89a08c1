#include "eval/replay/no_sync_tier.h"

#include "kvtier/forwarding_tier.h"

namespace kvtier::internal {
namespace {

class NoSyncTier final : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;
  Status Flush() override { return Status::OK(); }
};

}  // namespace

std::unique_ptr<Tier> WrapWithoutSync(std::unique_ptr<Tier> tier) {
  return std::make_unique<NoSyncTier>(std::move(tier));
}

}  // namespace kvtier::internal
