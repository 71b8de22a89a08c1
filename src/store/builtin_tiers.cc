#include "store/builtin_tiers.h"

#include "file/file_tier.h"
#include "fs/fs_tier.h"
#include "mem/mem_tier.h"
#include "object/client_counters.h"
#include "object/object_scheme.h"
#include "rados/rados_client.h"
#include "redis/redis_client.h"
#include "s3/s3_client.h"

namespace kvtier::internal {

void RegisterBuiltinTiers(const RegisterFn& add) {
  add("mem", [](const TierUrl& url, const TierOpenOptions& open) { return OpenMemTier(url, open); });
  add("fs", [](const TierUrl& url, const TierOpenOptions& open) { return OpenFsTier(url, open); });
  add("file", [](const TierUrl& url, const TierOpenOptions& open) { return OpenFileTier(url, open); });
  add("redis", object::ObjectTierFactory(redis::OpenRedisObjectClient, redis::RedisUrlOptionNames()));
  add("rados", object::ObjectTierFactory(rados::OpenRadosObjectClient, object::OptionNames(rados::kRadosUrlOptions)));
  add("s3", object::ObjectTierFactory(s3::OpenS3ObjectClient, object::OptionNames(s3::kS3UrlOptions)));
}

}  // namespace kvtier::internal
