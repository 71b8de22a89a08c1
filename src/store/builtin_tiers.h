// Registration of the tiers compiled into kvtier (mem://, file://, fs://, ...).
#pragma once

#include <functional>
#include <string>

#include "kvtier/tier.h"

namespace kvtier::internal {

using RegisterFn = std::function<void(const std::string& scheme, TierFactory factory)>;

// Defined in src/store/builtin_tiers.cc; each backend contributes one line there.
void RegisterBuiltinTiers(const RegisterFn& add);

}  // namespace kvtier::internal
