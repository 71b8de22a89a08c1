#include "store/builtin_tiers.h"

#include "file/file_tier.h"
#include "fs/fs_tier.h"
#include "mem/mem_tier.h"
#include "object/object_scheme.h"
#include "redis/redis_client.h"

namespace kvtier::internal {

void RegisterBuiltinTiers(const RegisterFn& add) {
  add("mem", [](const TierUrl& url, const TierOpenOptions& open) { return OpenMemTier(url, open); });
  add("fs", [](const TierUrl& url, const TierOpenOptions& open) { return OpenFsTier(url, open); });
  add("file", [](const TierUrl& url, const TierOpenOptions& open) { return OpenFileTier(url, open); });
  add("redis", object::ObjectTierFactory(redis::OpenRedisObjectClient, redis::RedisUrlOptionNames()));
}

}  // namespace kvtier::internal
