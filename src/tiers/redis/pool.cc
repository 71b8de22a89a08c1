#include "tiers/redis/pool.h"

namespace kvtier::redis {

Result<std::unique_ptr<Conn>> ConnPool::Acquire(const NodeAddr& node, bool* fresh) {
  {
    std::unique_lock lock(mu_);
    Node& n = nodes_[node];
    cv_.wait(lock, [&] { return !n.idle.empty() || n.open < per_node_; });
    if (!n.idle.empty()) {
      std::unique_ptr<Conn> c = std::move(n.idle.back());
      n.idle.pop_back();
      if (fresh != nullptr) *fresh = false;
      return c;
    }
    ++n.open;
    ++opened_;
  }
  if (fresh != nullptr) *fresh = true;
  auto c = Conn::Open(node, options_);  // outside the lock: a slow node delays only its own callers
  if (!c.ok()) {
    std::lock_guard lock(mu_);
    --nodes_[node].open;
    cv_.notify_all();
  }
  return c;
}

void ConnPool::Release(std::unique_ptr<Conn> conn) {
  std::lock_guard lock(mu_);
  Node& n = nodes_[conn->node()];
  if (conn->broken()) {
    --n.open;
    conn.reset();
  } else {
    n.idle.push_back(std::move(conn));
  }
  cv_.notify_all();
}

void ConnPool::DropIdle(const NodeAddr& node) {
  std::vector<std::unique_ptr<Conn>> drop;
  {
    std::lock_guard lock(mu_);
    Node& n = nodes_[node];
    n.open -= static_cast<int>(n.idle.size());
    drop.swap(n.idle);
    cv_.notify_all();
  }
}

uint64_t ConnPool::opened() const {
  std::lock_guard lock(mu_);
  return opened_;
}

}  // namespace kvtier::redis
