#include "tiers/redis/router.h"

#include <cctype>
#include <charconv>

namespace kvtier::redis {
namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::optional<long long> ToInt(std::string_view s) {
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// A node entry of CLUSTER SLOTS: [host, port, id, ...].
Result<NodeAddr> NodeFromReply(const ReplyNode& n, const NodeAddr& queried) {
  using T = ReplyNode::Type;
  if (n.type != T::kArray || n.elements.size() < 2 || n.elements[0].type != T::kString ||
      n.elements[1].type != T::kInteger) {
    return Status::InvalidArgument("CLUSTER SLOTS: malformed node entry");
  }
  const long long port = n.elements[1].integer;
  if (port < 1 || port > 65535) return Status::InvalidArgument("CLUSTER SLOTS: bad port");
  NodeAddr a{n.elements[0].str, static_cast<int>(port)};
  if (a.host.empty()) a.host = queried.host;
  if (a.host == "?" || a.host.find('\0') != std::string::npos) {
    return Status::InvalidArgument("CLUSTER SLOTS: node without a usable address");
  }
  return a;
}

}  // namespace

uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc ^= static_cast<uint16_t>(c) << 8;
    for (int i = 0; i < 8; ++i) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key) & (kSlotCount - 1);
}

Result<NodeAddr> ParseNodeAddr(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Status::InvalidArgument("bad node address '" + std::string(text) + "'");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument("node address '" + std::string(text) + "' needs host:port");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  const auto p = ToInt(port);
  bool host_ok = !host.empty();
  for (char c : host) {
    host_ok = host_ok && (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_' ||
                          c == ':' || c == '%');
  }
  if (!host_ok || !p || *p < 1 || *p > 65535) {
    return Status::InvalidArgument("bad node address '" + std::string(text) + "' (expected host:port)");
  }
  return NodeAddr{std::string(host), static_cast<int>(*p)};
}

Result<std::vector<NodeAddr>> ParseNodeList(std::string_view text) {
  std::vector<NodeAddr> out;
  while (true) {
    const size_t comma = text.find(',');
    KVTIER_ASSIGN_OR_RETURN(NodeAddr a, ParseNodeAddr(text.substr(0, comma)));
    out.push_back(std::move(a));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return out;
}

SlotMap SlotMap::Single(const NodeAddr& node) {
  SlotMap m;
  m.shards_.push_back(Shard{node, {}});
  m.owner_.fill(0);
  return m;
}

Result<SlotMap> SlotMap::FromClusterSlots(const ReplyNode& reply, const NodeAddr& queried) {
  using T = ReplyNode::Type;
  if (reply.type != T::kArray) return Status::InvalidArgument("CLUSTER SLOTS: not an array");
  SlotMap m;
  m.owner_.fill(-1);
  for (const ReplyNode& range : reply.elements) {
    if (range.type != T::kArray || range.elements.size() < 3 || range.elements[0].type != T::kInteger ||
        range.elements[1].type != T::kInteger) {
      return Status::InvalidArgument("CLUSTER SLOTS: malformed slot range");
    }
    const long long first = range.elements[0].integer;
    const long long last = range.elements[1].integer;
    if (first < 0 || last < first || last >= kSlotCount) {
      return Status::InvalidArgument("CLUSTER SLOTS: slot range out of bounds");
    }
    Shard shard;
    KVTIER_ASSIGN_OR_RETURN(shard.master, NodeFromReply(range.elements[2], queried));
    for (size_t i = 3; i < range.elements.size(); ++i) {
      auto r = NodeFromReply(range.elements[i], queried);
      if (r.ok()) shard.replicas.push_back(std::move(r).value());  // a replica without address is skipped
    }
    int16_t index = -1;
    for (size_t i = 0; i < m.shards_.size(); ++i) {
      if (m.shards_[i].master == shard.master) index = static_cast<int16_t>(i);
    }
    if (index < 0) {
      if (m.shards_.size() >= static_cast<size_t>(kSlotCount)) {
        return Status::InvalidArgument("CLUSTER SLOTS: too many shards");
      }
      index = static_cast<int16_t>(m.shards_.size());
      m.shards_.push_back(std::move(shard));
    }
    for (long long s = first; s <= last; ++s) m.owner_[s] = index;
  }
  return m;
}

const Shard* SlotMap::ShardFor(int slot) const {
  if (slot < 0 || slot >= kSlotCount || owner_[slot] < 0) return nullptr;
  return &shards_[owner_[slot]];
}

int SlotMap::covered_slots() const {
  int n = 0;
  for (int16_t o : owner_) n += o >= 0 ? 1 : 0;
  return n;
}

void SlotMap::Move(int slot, const NodeAddr& node) {
  if (slot < 0 || slot >= kSlotCount) return;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (shards_[i].master == node) {
      owner_[slot] = static_cast<int16_t>(i);
      return;
    }
  }
  if (shards_.size() >= static_cast<size_t>(kSlotCount)) return;
  owner_[slot] = static_cast<int16_t>(shards_.size());
  shards_.push_back(Shard{node, {}});
}

std::optional<Redirect> ParseRedirect(std::string_view error) {
  Redirect r;
  if (StartsWith(error, "MOVED ")) {
    r.kind = Redirect::Kind::kMoved;
    error.remove_prefix(6);
  } else if (StartsWith(error, "ASK ")) {
    r.kind = Redirect::Kind::kAsk;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto slot = ToInt(error.substr(0, space));
  if (!slot || *slot < 0 || *slot >= kSlotCount) return std::nullopt;
  r.slot = static_cast<int>(*slot);
  auto node = ParseNodeAddr(error.substr(space + 1));
  if (!node.ok()) return std::nullopt;
  r.node = std::move(node).value();
  return r;
}

Status ErrorReplyStatus(std::string_view error, std::string_view where) {
  const std::string msg = "redis " + std::string(where) + ": " + std::string(error);
  for (std::string_view p : {"TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "BUSY", "MOVED", "ASK"}) {
    if (StartsWith(error, p)) return Status::IOError(msg, /*retryable=*/true);
  }
  if (StartsWith(error, "OOM")) return Status::NoSpace(msg);
  if (StartsWith(error, "NOAUTH")) {
    return Status::InvalidArgument(msg + " (the server needs a password: password_file=)");
  }
  if (StartsWith(error, "WRONGPASS") || StartsWith(error, "NOPERM") ||
      error.find("invalid password") != std::string_view::npos) {
    return Status::InvalidArgument(msg + " (check password_file= and user=)");
  }
  return Status::IOError(msg);
}

bool IsClusterDisabled(std::string_view error) {
  return error.find("cluster support disabled") != std::string_view::npos;
}

std::string GlobEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace kvtier::redis
