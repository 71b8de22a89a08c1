// The pure part of the Redis Cluster client: key slots (CRC16/XMODEM with {hash tags}), the slot map
// built from a CLUSTER SLOTS reply, MOVED/ASK redirections and the meaning of error replies. No I/O:
// unit-tested (tests/tiers/redis/router_test.cc) and fuzzed (fuzz/redis_router_fuzz.cc).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::redis {

inline constexpr int kSlotCount = 16384;

// CRC16/XMODEM (polynomial 0x1021, initial value 0), as the Redis Cluster specification defines it.
uint16_t Crc16(std::string_view data);

// The hash slot of a key: of the part between the first '{' and the next '}' when that part is not
// empty, else of the whole key.
int KeySlot(std::string_view key);

struct NodeAddr {
  std::string host;
  int port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  bool operator==(const NodeAddr&) const = default;
  auto operator<=>(const NodeAddr&) const = default;
};

// "host:port" with a port in 1..65535; "[v6addr]:port" and, as Redis writes IPv6 in redirections,
// "v6addr:port" too. A host is letters, digits and . - _ : %. InvalidArgument otherwise.
Result<NodeAddr> ParseNodeAddr(std::string_view text);
// A comma-separated list of addresses (at least one).
Result<std::vector<NodeAddr>> ParseNodeList(std::string_view text);

// A reply tree, independent of the client library (converted from hiredis replies by the I/O layer).
struct ReplyNode {
  enum class Type { kString, kStatus, kError, kInteger, kNil, kArray };
  Type type = Type::kNil;
  std::string str;
  long long integer = 0;
  std::vector<ReplyNode> elements;
};

// One shard: a master and its replicas.
struct Shard {
  NodeAddr master;
  std::vector<NodeAddr> replicas;
};

// Which shard serves each slot.
class SlotMap {
 public:
  // Every slot served by one node (a single instance without cluster mode).
  static SlotMap Single(const NodeAddr& node);
  // From a CLUSTER SLOTS reply sent by `queried` (an empty host in the reply means that node's host).
  // InvalidArgument when the reply is malformed; slots not covered have no shard.
  static Result<SlotMap> FromClusterSlots(const ReplyNode& reply, const NodeAddr& queried);

  // The shard serving `slot`, or nullptr when no node serves it.
  const Shard* ShardFor(int slot) const;
  const std::vector<Shard>& shards() const { return shards_; }
  // Slots served by some shard.
  int covered_slots() const;
  // After a MOVED: `slot` is now served by master `node` (a shard of its own if not known yet).
  void Move(int slot, const NodeAddr& node);

 private:
  std::vector<Shard> shards_;
  std::array<int16_t, kSlotCount> owner_{};  // index into shards_, -1 = none
};

// A redirection error reply: "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381".
struct Redirect {
  enum class Kind { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  int slot = 0;
  NodeAddr node;
};
std::optional<Redirect> ParseRedirect(std::string_view error);

// The Status for an error reply that is not a redirection: TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN,
// BUSY are retryable; OOM is NoSpace; NOAUTH, WRONGPASS, NOPERM are InvalidArgument (no retry helps);
// anything else is IOError. `where` names the node.
Status ErrorReplyStatus(std::string_view error, std::string_view where);

// True when `error` is Redis's answer to a cluster command on a server without cluster mode.
bool IsClusterDisabled(std::string_view error);

// Escapes glob characters so that a SCAN MATCH pattern `GlobEscape(prefix) + "*"` matches exactly the
// keys starting with prefix.
std::string GlobEscape(std::string_view text);

}  // namespace kvtier::redis
