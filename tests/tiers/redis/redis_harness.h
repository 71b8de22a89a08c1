// Test harness: starts a Redis cluster (or one instance) through scripts/redis-cluster.sh in a temporary
// folder, talks to its nodes directly, and stops it by the PIDs the script recorded.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tiers/object/object_client.h"
#include "tiers/redis/conn.h"
#include "tiers/redis/redis_client.h"

namespace kvtier::redis::testing {

// Empty when redis-server is installed, else why the tests are skipped.
std::string SkipReason();

class LocalRedis {
 public:
  // Starts `masters` x (1 + `replicas`) nodes; `env` is added to the script's environment
  // (KVTIER_REDIS_MAXMEMORY, KVTIER_REDIS_POLICY, KVTIER_REDIS_PASSWORD). Prints the start time.
  static Result<std::unique_ptr<LocalRedis>> Start(int masters, int replicas,
                                                   const std::map<std::string, std::string>& env = {});
  ~LocalRedis();

  const std::string& url() const { return url_; }
  const std::vector<int>& ports() const { return ports_; }
  const std::string& dir() const { return dir_; }
  std::string password() const;

  // A command on one node (a fresh connection), its reply as a tree.
  Result<ReplyNode> Command(int port, const std::vector<std::string>& argv) const;
  // The node's PID from its pid file.
  int Pid(int port) const;
  // kill -9 of that node (waits until it is gone).
  void Kill(int port);
  // Starts the node again from its configuration (empty: no persistence) and waits for PING.
  Status Restart(int port);
  // Waits (bounded) until every node that is up says cluster_state:ok.
  bool WaitClusterOk(int timeout_s) const;
  // Waits (bounded) until CLUSTER SLOTS on `ask_port` lists `replicas` replicas for every shard (Redis
  // lists a replica only once it has reported a replication offset).
  bool WaitReplicasListed(int ask_port, size_t replicas, int timeout_s) const;
  // The master port serving `slot` according to node `ask_port`.
  int MasterOf(int slot, int ask_port) const;

 private:
  std::string dir_;
  std::string url_;
  std::string env_;
  std::vector<int> ports_;
};

// Deterministic pseudo-random bytes for object `seed`.
std::vector<std::byte> Pattern(size_t size, uint64_t seed);

// Writes objects through the client; returns the statuses.
Status PutOne(object::ObjectClient& c, const std::string& name, const std::vector<std::byte>& data);

}  // namespace kvtier::redis::testing
