#include "store/builtin_tiers.h"

#include "mem/mem_tier.h"

namespace kvtier::internal {

void RegisterBuiltinTiers(const RegisterFn& add) {
  add("mem", OpenMemTier);
}

}  // namespace kvtier::internal
