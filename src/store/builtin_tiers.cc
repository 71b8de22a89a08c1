#include "store/builtin_tiers.h"

#include "tiers/file/file_tier.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/mem/mem_tier.h"
#include "tiers/object/client_counters.h"
#include "tiers/object/object_scheme.h"
#include "tiers/rados/rados_client.h"
#include "tiers/redis/redis_client.h"
#include "tiers/s3/s3_client.h"
#include "tiers/shm/shm_tier.h"

namespace kvtier::internal {

void RegisterBuiltinTiers(const RegisterFn& add) {
  add("mem", [](const TierUrl& url, const TierOpenOptions& open) { return OpenMemTier(url, open); });
  add("shm", [](const TierUrl& url, const TierOpenOptions& open) { return OpenShmTier(url, open); });
  add("fs", [](const TierUrl& url, const TierOpenOptions& open) { return OpenFsTier(url, open); });
  add("file", [](const TierUrl& url, const TierOpenOptions& open) { return OpenFileTier(url, open); });
  add("redis", object::ObjectTierFactory(redis::OpenRedisObjectClient, redis::RedisUrlOptionNames()));
  add("rados", object::ObjectTierFactory(rados::OpenRadosObjectClient, object::OptionNames(rados::kRadosUrlOptions)));
  add("s3", object::ObjectTierFactory(s3::OpenS3ObjectClient, object::OptionNames(s3::kS3UrlOptions)));
}

}  // namespace kvtier::internal
