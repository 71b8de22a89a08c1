// mem://?capacity=SIZE[&page=SIZE][&verify=BOOL]: the in-process memory tier.
#pragma once

#include <memory>

#include "kvtier/tier.h"

namespace kvtier::internal {

Result<std::unique_ptr<Tier>> OpenMemTier(const TierUrl& url);

}  // namespace kvtier::internal
