// RedisClient: the ObjectClient of redis:// tiers, over a Redis Cluster (slot routing, MOVED/ASK,
// reads from replicas) or a single Redis instance (detected when CLUSTER SLOTS answers that cluster
// support is disabled).
//
//   redis://host:port[,host:port...]?password_file=F&user=U&replica_reads=1&ttl=1h
//       &conns_per_node=4&namespace=N&timeout_ms=10000&connect_timeout_ms=2000
//
// The password is read from password_file (first line), never from the URL. Options shared by every
// object tier (inflight, retries, backoff, capacity, key_file, prefix, timeout_ms, connect_timeout_ms)
// are parsed by ObjectTier; of those the client reads only the two timeouts (same names, same meaning:
// 0 or absent = the defaults, 10 s per request and 2 s per connection attempt). Objects are stored as Redis strings under "<namespace>:<name>" ("<name>" without a
// namespace); List reports names without the namespace.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/tier.h"
#include "tiers/object/object_client.h"
#include "tiers/redis/router.h"

namespace kvtier::redis {

struct RedisOptions {
  std::vector<NodeAddr> seeds;
  std::string user;
  std::string password;
  bool replica_reads = false;
  std::chrono::milliseconds ttl{0};  // 0 = no expiry
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds timeout{10000};
  int conns_per_node = 4;
  std::string ns;
  bool read_only = false;  // PutMany and Delete fail with NotSupported
  // The slot map is reloaded when a redirection or failure made it stale, and at least this often.
  std::chrono::milliseconds map_max_age{10000};
};

// The URL options this client owns.
inline constexpr std::string_view kRedisUrlOptions[] = {
    "password_file", "user", "replica_reads", "ttl", "conns_per_node", "namespace"};

// Parses a redis:// URL (its path is the node list). InvalidArgument on malformed options, an
// unreadable password file, or a password in the URL.
Result<RedisOptions> ParseRedisOptions(const TierUrl& url);

// "1500ms", "2s", "1500" (milliseconds); InvalidArgument otherwise (used for ttl=).
Result<std::chrono::milliseconds> ParseMillis(std::string_view text);

// Opens a client and loads the slot map (or detects a single instance); fails with the server's
// reason when no seed answers, or with one InvalidArgument when authentication fails.
Result<std::unique_ptr<object::ObjectClient>> OpenRedisClient(const RedisOptions& options);
Result<std::unique_ptr<object::ObjectClient>> OpenRedisClient(const TierUrl& url,
                                                              const TierOpenOptions& open_options);
// The object::ObjectClientFactory of redis:// (timeouts and read_only from ObjectTier's shared options).
Result<std::unique_ptr<object::ObjectClient>> OpenRedisObjectClient(const TierUrl& url,
                                                                    const object::ObjectClientOptions& options);

// kRedisUrlOptions as ObjectTierFactory's backend_options. redis:// is registered in
// store/builtin_tiers.cc: add("redis", object::ObjectTierFactory(OpenRedisObjectClient, RedisUrlOptionNames())).
std::vector<std::string> RedisUrlOptionNames();

}  // namespace kvtier::redis
