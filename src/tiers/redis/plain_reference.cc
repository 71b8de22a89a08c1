#include "tiers/redis/plain_reference.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tiers/redis/redis_client.h"

namespace kvtier::redis {
namespace {

struct CtxFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Ctx = std::unique_ptr<redisContext, CtxFree>;
using Reply = std::unique_ptr<redisReply, ReplyFree>;

timeval Tv(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>(ms.count() % 1000 * 1000)};
}

Reply Command(redisContext* c, const char* fmt, auto... args) {
  return Reply(static_cast<redisReply*>(redisCommand(c, fmt, args...)));
}

Result<Ctx> Connect(const NodeAddr& node, const RedisOptions& o) {
  Ctx c(redisConnectWithTimeout(node.host.c_str(), node.port, Tv(o.connect_timeout)));
  if (!c || c->err) {
    return Status::IOError("reference: connect " + node.ToString() + ": " + (c ? c->errstr : "out of memory"));
  }
  redisSetTimeout(c.get(), Tv(o.timeout));
  if (!o.password.empty()) {
    Reply r = o.user.empty() ? Command(c.get(), "AUTH %s", o.password.c_str())
                             : Command(c.get(), "AUTH %s %s", o.user.c_str(), o.password.c_str());
    if (!r || r->type == REDIS_REPLY_ERROR) return Status::InvalidArgument("reference: AUTH refused by " + node.ToString());
  }
  return c;
}

struct Master {
  NodeAddr addr;
  std::vector<std::pair<int, int>> slots;
  std::string tag;  // "{...}" whose slot this master serves
};

// The masters and their slot ranges, from CLUSTER SLOTS ([start, end, [host, port, ...], replicas...]).
Result<std::vector<Master>> FindMasters(const RedisOptions& o) {
  Status last = Status::IOError("reference: no seed");
  for (const NodeAddr& seed : o.seeds) {
    auto c = Connect(seed, o);
    if (!c.ok()) {
      last = c.status();
      continue;
    }
    Reply r = Command(c->get(), "CLUSTER SLOTS");
    if (!r) return Status::IOError("reference: CLUSTER SLOTS on " + seed.ToString() + ": no reply");
    if (r->type == REDIS_REPLY_ERROR) return std::vector<Master>{{seed, {{0, kSlotCount - 1}}, "{}"}};
    std::vector<Master> masters;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[2]->elements < 2) continue;
      const redisReply* node = e->element[2];
      NodeAddr a{node->element[0]->len ? node->element[0]->str : seed.host,
                 static_cast<int>(node->element[1]->integer)};
      auto it = std::find_if(masters.begin(), masters.end(), [&](const Master& m) { return m.addr == a; });
      if (it == masters.end()) it = masters.insert(masters.end(), Master{a, {}, {}});
      it->slots.emplace_back(static_cast<int>(e->element[0]->integer), static_cast<int>(e->element[1]->integer));
    }
    if (masters.empty()) return Status::IOError("reference: CLUSTER SLOTS on " + seed.ToString() + " lists no master");
    for (Master& m : masters) {
      for (int j = 0; m.tag.empty(); ++j) {
        const std::string t = "{r" + std::to_string(j) + "}";
        const int s = KeySlot(t);
        for (auto [lo, hi] : m.slots) {
          if (s >= lo && s <= hi) m.tag = t;
        }
      }
    }
    return masters;
  }
  return last;
}

std::string Key(const Master& m, uint64_t i) {
  return m.tag + "kvtier-plain-ref:" + std::to_string(::getpid()) + ":" + std::to_string(i);
}

// Value i: its index, then a fixed pattern.
void Fill(std::vector<char>& b, uint64_t i) {
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<char>(k * 131 + 7);
  std::memcpy(b.data(), &i, std::min(sizeof(i), b.size()));
}

struct Plan {
  std::vector<Master> masters;
  uint64_t streams;
  const Master& Of(uint64_t i) const { return masters[(i % streams) % masters.size()]; }
};

Status PutAll(const Plan& p, const RedisOptions& o, uint64_t value_bytes, uint64_t count) {
  std::vector<Ctx> conns;
  for (const Master& m : p.masters) {
    KVTIER_ASSIGN_OR_RETURN(Ctx c, Connect(m.addr, o));
    conns.push_back(std::move(c));
  }
  std::vector<char> value(value_bytes);
  for (uint64_t i = 0; i < count; ++i) {
    Fill(value, i);
    const std::string key = Key(p.Of(i), i);
    Reply r = Command(conns[(i % p.streams) % conns.size()].get(), "SET %b %b", key.data(), key.size(),
                      value.data(), value.size());
    if (!r || r->type == REDIS_REPLY_ERROR) {
      return Status::IOError("reference: SET " + key + ": " + (r ? std::string(r->str, r->len) : "no reply"));
    }
  }
  return Status::OK();
}

void DeleteAll(const Plan& p, const RedisOptions& o, uint64_t count) {
  std::vector<Ctx> conns;
  for (const Master& m : p.masters) {
    auto c = Connect(m.addr, o);
    if (!c.ok()) return;
    conns.push_back(std::move(*c));
  }
  for (uint64_t i = 0; i < count; ++i) {
    const std::string key = Key(p.Of(i), i);
    (void)Command(conns[(i % p.streams) % conns.size()].get(), "DEL %b", key.data(), key.size());
  }
}

// Stream k: values k, k + streams, ... on its own connection, one GET at a time.
void ReadStream(const Plan& p, redisContext* c, uint64_t k, uint64_t value_bytes, uint64_t count,
                PlainGetResult* out) {
  for (uint64_t i = k; i < count; i += p.streams) {
    const std::string key = Key(p.Of(i), i);
    Reply r = Command(c, "GET %b", key.data(), key.size());
    uint64_t tag = ~i;
    if (r && r->type == REDIS_REPLY_STRING && r->len >= 8) std::memcpy(&tag, r->str, sizeof(tag));
    const bool ok = r && r->type == REDIS_REPLY_STRING && static_cast<uint64_t>(r->len) == value_bytes &&
                    (value_bytes < 8 || tag == i);
    if (ok) {
      ++out->values;
      out->bytes += value_bytes;
    } else {
      ++out->errors;
    }
  }
}

}  // namespace

Result<PlainGetResult> PlainHiredisGetReference(const TierUrl& url, uint64_t value_bytes, uint64_t count,
                                                uint64_t streams) {
  KVTIER_ASSIGN_OR_RETURN(RedisOptions o, ParseRedisOptions(url));
  Plan p{{}, std::clamp<uint64_t>(streams, 1, std::max<uint64_t>(count, 1))};
  KVTIER_ASSIGN_OR_RETURN(p.masters, FindMasters(o));
  Status put = PutAll(p, o, value_bytes, count);
  PlainGetResult total;
  std::vector<Ctx> conns;
  for (uint64_t k = 0; put.ok() && k < p.streams; ++k) {
    auto c = Connect(p.masters[k % p.masters.size()].addr, o);
    if (!c.ok()) put = c.status();
    if (c.ok()) conns.push_back(std::move(*c));
  }
  if (put.ok()) {
    std::vector<PlainGetResult> part(p.streams);
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t k = 0; k < p.streams; ++k) {
      threads.emplace_back(ReadStream, std::cref(p), conns[k].get(), k, value_bytes, count, &part[k]);
    }
    for (auto& t : threads) t.join();
    total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& r : part) {
      total.values += r.values;
      total.bytes += r.bytes;
      total.errors += r.errors;
    }
  }
  DeleteAll(p, o, count);
  KVTIER_RETURN_IF_ERROR(put);
  return total;
}

}  // namespace kvtier::redis
