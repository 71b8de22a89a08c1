// The URL options every object tier shares, parsed once for every backend:
//   inflight=SIZE           bytes of objects in flight per tier (all calls together), default 256MiB;
//                           a GetMany batch is cut into windows of at most this many bytes
//   retries=N               tries after the first on a retryable error (Status::retryable()), default 3
//   backoff_ms=N            delay before the first retry, doubled each time, with full jitter; default 10
//   retry_budget_ms=N       bound on the time one operation spends retrying (sleeps and tries), default 2000
//   timeout_ms=N            per request, passed to the client; 0 (default): the client's own
//   connect_timeout_ms=N    per connection attempt, passed to the client; 0 (default): the client's own
//   capacity=SIZE           optional bound on the bytes this process keeps there (LRU, object_index.h)
//   key_file=PATH           encrypted, authenticated chunks (docs/encryption.md)
//   prefix=TEXT             put before every object name (default empty; names in object_names.h)
// A backend names its own extra options; anything else is an error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/chunk_cipher.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"
#include "tiers/object/object_client.h"

namespace kvtier::object {

struct RetryPolicy {
  uint32_t retries = 3;
  std::chrono::milliseconds backoff{10};
  std::chrono::milliseconds budget{2000};
  // How the tier waits between tries; tests set a recorder so nothing depends on time.
  std::function<void(std::chrono::milliseconds)> sleep;
};

struct ObjectTierOptions {
  uint64_t inflight_bytes = 256ull << 20;
  uint64_t capacity_bytes = 0;  // 0: unbounded
  std::string prefix;
  std::shared_ptr<const internal::ChunkCipher> cipher;
  RetryPolicy retry;
  ObjectClientOptions client;
};

// The shared option names, for messages and for backends that list theirs.
const std::vector<std::string_view>& SharedObjectOptionNames();

// Parses the shared options; InvalidArgument for a malformed value or an option that is neither shared
// nor in `backend_options`.
Result<ObjectTierOptions> ParseObjectTierOptions(const TierUrl& url, const std::vector<std::string>& backend_options,
                                                 const TierOpenOptions& open);

}  // namespace kvtier::object
