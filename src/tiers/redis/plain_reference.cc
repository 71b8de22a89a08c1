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

#include "core/threads.h"
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
  // Keep the reader's buffer between replies: by default hiredis frees it once empty and grows a new
  // one (in steps of 1 MB past 1 MB) for every large value.
  if (c->reader != nullptr) c->reader->maxbuf = 0;
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

bool Flush(redisContext* c) {
  int done = 0;
  while (!done) {
    if (redisBufferWrite(c, &done) != REDIS_OK) return false;
  }
  return true;
}

Reply NextReply(redisContext* c) {
  void* r = nullptr;
  if (redisGetReply(c, &r) != REDIS_OK) return nullptr;
  return Reply(static_cast<redisReply*>(r));
}

// One connection's share of a phase: pipelined SETs (`write`) or GETs of plan.values.
void RunConnection(const std::vector<Master>& masters, const PipelinePlan& plan, redisContext* c, bool write,
                   uint64_t value_bytes, PlainRunResult* out) {
  const Master& m = masters[plan.master];
  std::vector<char> value(write ? value_bytes : 0);
  if (write) Fill(value, 0);
  PipelineSteps steps;
  steps.send = [&](uint64_t k) {
    const uint64_t i = plan.values[k];
    const std::string key = Key(m, i);
    if (!write) return redisAppendCommand(c, "GET %b", key.data(), key.size()) == REDIS_OK;
    std::memcpy(value.data(), &i, std::min(sizeof(i), value.size()));  // the tag; hiredis copies it now
    const char* argv[] = {"SET", key.data(), value.data()};
    const size_t len[] = {3, key.size(), value.size()};
    return redisAppendCommandArgv(c, 3, argv, len) == REDIS_OK;
  };
  steps.flush = [&] { return Flush(c); };
  steps.receive = [&](uint64_t k) {
    const uint64_t i = plan.values[k];
    Reply r = NextReply(c);
    if (!r) return false;
    bool ok = false;
    if (write) {
      ok = r->type == REDIS_REPLY_STATUS;
    } else if (r->type == REDIS_REPLY_STRING && static_cast<uint64_t>(r->len) == value_bytes) {
      uint64_t tag = ~i;
      if (value_bytes >= sizeof(tag)) std::memcpy(&tag, r->str, sizeof(tag));
      ok = value_bytes < sizeof(tag) || tag == i;
    }
    out->values += ok ? 1 : 0;
    out->bytes += ok ? value_bytes : 0;
    out->errors += ok ? 0 : 1;
    return true;
  };
  const uint64_t answered = RunPipeline(plan.values.size(), plan.depth, steps);
  out->errors += plan.values.size() - answered;  // the connection failed: the rest is lost
}

// One timed phase: a connection per plan (opened before the clock starts), a thread per connection.
Result<PlainRunResult> RunPhase(const std::vector<Master>& masters, const RedisOptions& o, uint64_t value_bytes,
                                uint64_t count, PipelineShape shape, bool write) {
  const std::vector<PipelinePlan> plans = PlanPipelines(masters.size(), count, shape);
  std::vector<Ctx> conns;
  for (const PipelinePlan& p : plans) {
    KVTIER_ASSIGN_OR_RETURN(Ctx c, Connect(masters[p.master].addr, o));
    conns.push_back(std::move(c));
  }
  std::vector<PlainRunResult> part(plans.size());
  std::vector<std::thread> threads;
  bool refused = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t k = 0; k < plans.size() && !refused; ++k) {
    refused = !internal::TryStartThread(&threads, [&, k] {
      RunConnection(masters, plans[k], conns[k].get(), write, value_bytes, &part[k]);
    });
  }
  for (auto& t : threads) t.join();
  if (refused) return Status::IOError("reference: the OS refused a connection thread", true);
  PlainRunResult total;
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& r : part) {
    total.values += r.values;
    total.bytes += r.bytes;
    total.errors += r.errors;
  }
  return total;
}

void DeleteAll(const std::vector<Master>& masters, const RedisOptions& o, uint64_t count) {
  for (uint64_t m = 0; m < masters.size(); ++m) {
    auto c = Connect(masters[m].addr, o);
    if (!c.ok()) continue;
    uint64_t sent = 0;
    for (uint64_t i = m; i < count; i += masters.size(), ++sent) {
      const std::string key = Key(masters[m], i);
      (void)redisAppendCommand(c->get(), "DEL %b", key.data(), key.size());
    }
    while (sent > 0 && NextReply(c->get()) != nullptr) --sent;  // pipelined; stops at a failure
  }
}

}  // namespace

PipelineShape ReadShapeOf(uint64_t inflight_bytes, uint64_t value_bytes) {
  value_bytes = std::max<uint64_t>(value_bytes, 1);
  const uint64_t half = inflight_bytes / 2;
  if (value_bytes <= half) return {2 * (half / value_bytes), 2};
  return {std::max<uint64_t>(1, inflight_bytes / value_bytes), 1};
}

PipelineShape WriteShapeOf(uint64_t inflight_bytes, uint64_t value_bytes, uint64_t conns_per_node) {
  value_bytes = std::max<uint64_t>(value_bytes, 1);
  return {std::max<uint64_t>(1, inflight_bytes / value_bytes), std::max<uint64_t>(1, conns_per_node)};
}

std::vector<PipelinePlan> PlanPipelines(uint64_t masters, uint64_t count, PipelineShape shape) {
  masters = std::max<uint64_t>(masters, 1);
  const uint64_t in_flight = std::max<uint64_t>(shape.in_flight, 1);
  const uint64_t conns =
      std::max(masters, std::min(in_flight, masters * std::max<uint64_t>(shape.conns_per_master, 1)));
  std::vector<PipelinePlan> plans(conns);
  for (uint64_t k = 0; k < conns; ++k) {
    plans[k].master = k % masters;
    plans[k].depth = std::max<uint64_t>(1, in_flight / conns + (k < in_flight % conns ? 1 : 0));
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t m = i % masters;
    const uint64_t of_master = conns / masters + (m < conns % masters ? 1 : 0);  // connections k = m + j * masters
    plans[m + (i / masters) % of_master * masters].values.push_back(i);
  }
  return plans;
}

uint64_t RunPipeline(uint64_t n, uint64_t depth, const PipelineSteps& steps) {
  depth = std::max<uint64_t>(depth, 1);
  uint64_t sent = 0;
  uint64_t answered = 0;
  while (answered < n) {
    for (; sent < n && sent - answered < depth; ++sent) {
      if (!steps.send(sent)) return answered;
    }
    if (!steps.flush() || !steps.receive(answered)) return answered;
    ++answered;
  }
  return answered;
}

Result<PlainReferenceResult> PlainHiredisReference(const TierUrl& url, uint64_t value_bytes, uint64_t count,
                                                   PipelineShape write, PipelineShape read) {
  KVTIER_ASSIGN_OR_RETURN(RedisOptions o, ParseRedisOptions(url));
  KVTIER_ASSIGN_OR_RETURN(std::vector<Master> masters, FindMasters(o));
  // Fewer values in flight than masters: the values live on as many masters as are in flight.
  const uint64_t used = std::min<uint64_t>({masters.size(), std::max<uint64_t>(write.in_flight, 1),
                                            std::max<uint64_t>(read.in_flight, 1)});
  masters.resize(used);
  PlainReferenceResult out;
  auto w = RunPhase(masters, o, value_bytes, count, write, /*write=*/true);
  if (w.ok()) out.write = *w;
  auto r = w.ok() ? RunPhase(masters, o, value_bytes, count, read, /*write=*/false) : w;
  if (r.ok()) out.read = *r;
  DeleteAll(masters, o, count);
  KVTIER_RETURN_IF_ERROR(r.status());
  return out;
}

}  // namespace kvtier::redis
