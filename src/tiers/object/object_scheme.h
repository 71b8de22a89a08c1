// Turning an ObjectClient factory into a tier scheme. A backend is one line:
//   add("redis", object::ObjectTierFactory(OpenRedisClient, {"replicas", "ttl", ...}));  // builtin_tiers.cc
// or, outside the built-in set (tests, plug-ins):
//   object::RegisterObjectScheme("objmem", factory);
// The factory gets the URL (for its own options: host, bucket, credentials file, ...) and the shared
// client options (read-only, timeouts); the shared options of object_options.h are parsed here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvtier/tier.h"
#include "tiers/object/object_client.h"
#include "tiers/object/object_options.h"

namespace kvtier::object {

// Opens an ObjectTier over `client` (e.g. a test's fake). `url` names it in Stats.
Result<std::unique_ptr<Tier>> OpenObjectTier(std::unique_ptr<ObjectClient> client, ObjectTierOptions options,
                                             std::string url, bool read_only = false);

// A TierFactory: parses the shared options (and accepts `backend_options`), makes the client, opens
// the tier.
TierFactory ObjectTierFactory(ObjectClientFactory factory, std::vector<std::string> backend_options = {});

inline void RegisterObjectScheme(const std::string& scheme, ObjectClientFactory factory,
                                 std::vector<std::string> backend_options = {}) {
  RegisterTierScheme(scheme, ObjectTierFactory(std::move(factory), std::move(backend_options)));
}

}  // namespace kvtier::object
