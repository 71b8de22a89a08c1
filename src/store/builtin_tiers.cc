#include "store/builtin_tiers.h"

#include "file/file_tier.h"
#include "fs/fs_tier.h"
#include "mem/mem_tier.h"

namespace kvtier::internal {

void RegisterBuiltinTiers(const RegisterFn& add) {
  add("mem", OpenMemTier);
  add("fs", OpenFsTier);
  add("file", [](const TierUrl& url) { return OpenFileTier(url); });
}

}  // namespace kvtier::internal
