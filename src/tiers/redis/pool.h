// Connections per node: at most `per_node` open to each node, each used by one thread at a time.
// A connection that failed is closed when given back; the next Acquire opens a fresh one.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tiers/redis/conn.h"

namespace kvtier::redis {

class ConnPool {
 public:
  ConnPool(ConnOptions options, int per_node) : options_(std::move(options)), per_node_(per_node) {}

  // A connection to `node`; waits while `per_node` are in use. `fresh` is set when it was just opened.
  Result<std::unique_ptr<Conn>> Acquire(const NodeAddr& node, bool* fresh = nullptr);
  // Gives a connection back (closes it when broken).
  void Release(std::unique_ptr<Conn> conn);
  // Closes every idle connection to `node` (after it failed: the ones waiting are as stale).
  void DropIdle(const NodeAddr& node);
  uint64_t opened() const;

 private:
  struct Node {
    std::vector<std::unique_ptr<Conn>> idle;
    int open = 0;
  };
  const ConnOptions options_;
  const int per_node_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<NodeAddr, Node> nodes_;
  uint64_t opened_ = 0;
};

}  // namespace kvtier::redis
