#include "tiers/redis/redis_client.h"

#include <hiredis/hiredis.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/threads.h"
#include "tiers/redis/conn.h"
#include "tiers/redis/pool.h"

namespace kvtier::redis {
namespace {

constexpr int kMaxRounds = 5;  // redirections and reconnects one call follows before giving up
// The map is reloaded at least this often: Redis lists a replica in CLUSTER SLOTS only once it has
// synchronised, and a failover without a redirection to us would otherwise go unseen.

// What became of one command of a pipeline.
struct Outcome {
  enum class Kind { kDone, kMoved, kAsk, kConnFailed } kind = Kind::kDone;
  Redirect redirect;
};

struct Pending {
  size_t index = 0;
  int slot = 0;
  std::optional<NodeAddr> ask;  // send ASKING + the command to this node
  bool asked = false;
  bool master_only = false;     // a replica failed: read from the master
};

using Encode = std::function<void(size_t index, RespWriter& w)>;
using Decode = std::function<Status(size_t index, const redisReply& r)>;

class RedisClient final : public object::ObjectClient {
 public:
  explicit RedisClient(RedisOptions o)
      : opts_(std::move(o)),
        pool_(ConnOptions{opts_.connect_timeout, opts_.timeout, opts_.user, opts_.password, false},
              opts_.conns_per_node),
        ro_pool_(ConnOptions{opts_.connect_timeout, opts_.timeout, opts_.user, opts_.password, true},
                 opts_.conns_per_node) {}

  Status Init() { return Refresh(nullptr); }

  std::string Describe() const override {
    std::string s = "redis://";
    for (size_t i = 0; i < opts_.seeds.size(); ++i) s += (i ? "," : "") + opts_.seeds[i].ToString();
    auto m = CurrentMap();
    if (!cluster_) return s + " (single instance)";
    return s + " (cluster, " + std::to_string(m->shards().size()) + " shards)";
  }

  bool ScatterReads() const override { return true; }

  // The shard (1-based) whose slots hold the key, in the current map.
  uint64_t Placement(std::string_view name) const override {
    auto map = CurrentMap();
    const Shard* shard = map ? map->ShardFor(KeySlot(Key(name))) : nullptr;
    return shard == nullptr ? 0 : static_cast<uint64_t>(shard - map->shards().data()) + 1;
  }

  // Every reply is read straight from the socket into its op's buffers (Conn::ReadDirect), and the op
  // is handed to its `landed` callback on the node's thread while later replies are still arriving.
  void GetMany(std::span<object::ObjectRead> ops) override {
    std::vector<std::string> keys;
    for (const auto& op : ops) keys.push_back(Key(op.name));
    auto encode = [&](size_t i, RespWriter& w) {
      w.BeginCommand(2);
      w.Arg("GET");
      w.Arg(keys[i]);
    };
    auto decode = [&](size_t i, const redisReply& r) -> Status {
      object::ObjectRead& op = ops[i];
      if (r.type == REDIS_REPLY_NIL) return Status::NotFound("redis: no object " + op.name);
      if (r.type != REDIS_REPLY_STRING) return Status::IOError("redis: GET " + op.name + ": unexpected reply");
      op.bytes = r.len;
      if (r.len > op.Capacity()) {
        return Status::InvalidArgument("redis: object " + op.name + " has " + std::to_string(r.len) +
                                       " bytes, more than the " + std::to_string(op.Capacity()) + " expected");
      }
      if (op.landed) op.landed(op);
      return Status::OK();
    };
    std::vector<Status> st = Run(keys, /*read=*/true, encode, decode, ops);
    for (size_t i = 0; i < ops.size(); ++i) ops[i].status = std::move(st[i]);
  }

  void PutMany(std::span<object::ObjectWrite> ops) override {
    if (opts_.read_only) {
      for (auto& op : ops) op.status = Status::NotSupported("redis: opened read-only");
      return;
    }
    std::vector<std::string> keys;
    for (const auto& op : ops) keys.push_back(Key(op.name));
    const std::string ttl = std::to_string(opts_.ttl.count());
    auto encode = [&](size_t i, RespWriter& w) {
      w.BeginCommand(opts_.ttl.count() > 0 ? 5 : 3);
      w.Arg("SET");
      w.Arg(keys[i]);
      w.ArgPieces(ops[i].data);
      if (opts_.ttl.count() > 0) {
        w.Arg("PX");
        w.Arg(ttl);
      }
    };
    auto decode = [&](size_t i, const redisReply& r) -> Status {
      if (r.type == REDIS_REPLY_STATUS) return Status::OK();
      return Status::IOError("redis: SET " + ops[i].name + ": unexpected reply");
    };
    std::vector<Status> st = Run(keys, /*read=*/false, encode, decode);
    for (size_t i = 0; i < ops.size(); ++i) ops[i].status = std::move(st[i]);
  }

  Status Delete(std::string_view name) override {
    if (opts_.read_only) return Status::NotSupported("redis: opened read-only");
    const std::vector<std::string> keys{Key(name)};
    auto encode = [&](size_t, RespWriter& w) {
      w.BeginCommand(2);
      w.Arg("DEL");
      w.Arg(keys[0]);
    };
    auto decode = [&](size_t, const redisReply& r) -> Status {
      return r.type == REDIS_REPLY_INTEGER ? Status::OK() : Status::IOError("redis: DEL: unexpected reply");
    };
    return std::move(Run(keys, false, encode, decode)[0]);
  }

  Result<bool> Exists(std::string_view name) override {
    const std::vector<std::string> keys{Key(name)};
    bool exists = false;
    auto encode = [&](size_t, RespWriter& w) {
      w.BeginCommand(2);
      w.Arg("EXISTS");
      w.Arg(keys[0]);
    };
    auto decode = [&](size_t, const redisReply& r) -> Status {
      if (r.type != REDIS_REPLY_INTEGER) return Status::IOError("redis: EXISTS: unexpected reply");
      exists = r.integer > 0;
      return Status::OK();
    };
    KVTIER_RETURN_IF_ERROR(std::move(Run(keys, false, encode, decode)[0]));
    return exists;
  }

  Status List(std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn) override {
    auto map = CurrentMap();
    for (const Shard& shard : map->shards()) {
      bool more = true;
      KVTIER_RETURN_IF_ERROR(ListNode(shard.master, prefix, fn, &more));
      if (!more) break;
    }
    return Status::OK();
  }

  object::ObjectClientStats Stats() const override {
    return {requests_.load(), retries_.load(), errors_.load()};
  }

 private:
  std::string Key(std::string_view name) const {
    return opts_.ns.empty() ? std::string(name) : opts_.ns + ":" + std::string(name);
  }

  std::shared_ptr<const SlotMap> CurrentMap() const {
    std::lock_guard lock(map_mu_);
    return map_;
  }

  // Loads the slot map from any node that answers (known nodes first, then the seeds). `seen` is the
  // map the caller found stale: when another thread has replaced it meanwhile, nothing is done.
  Status Refresh(const SlotMap* seen) {
    std::lock_guard refresh(refresh_mu_);
    std::vector<NodeAddr> candidates;
    if (auto m = CurrentMap()) {
      if (seen != nullptr && m.get() != seen) return Status::OK();
      for (const Shard& s : m->shards()) {
        candidates.push_back(s.master);
        candidates.insert(candidates.end(), s.replicas.begin(), s.replicas.end());
      }
    }
    candidates.insert(candidates.end(), opts_.seeds.begin(), opts_.seeds.end());
    Status last = Status::IOError("redis: no node to ask for the slot map", true);
    for (const NodeAddr& node : candidates) {
      auto r = LoadMapFrom(node);
      if (r.ok()) {
        std::lock_guard lock(map_mu_);
        map_ = std::make_shared<const SlotMap>(std::move(r).value());
        map_loaded_ = std::chrono::steady_clock::now();
        stale_ = false;
        return Status::OK();
      }
      if (r.status().code() == Code::kInvalidArgument) return r.status();  // authentication: no retry storm
      last = r.status();
    }
    return last;
  }

  Result<SlotMap> LoadMapFrom(const NodeAddr& node) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, pool_.Acquire(node));
    const std::string_view argv[] = {"CLUSTER", "SLOTS"};
    auto reply = conn->Command(argv);
    pool_.Release(std::move(conn));
    ++requests_;
    KVTIER_RETURN_IF_ERROR(reply.status());
    const redisReply& r = **reply;
    if (r.type == REDIS_REPLY_ERROR) {
      const std::string_view err(r.str, r.len);
      if (IsClusterDisabled(err)) {
        cluster_ = false;
        return SlotMap::Single(node);
      }
      Status s = ErrorReplyStatus(err, node.ToString());
      if (s.code() == Code::kInvalidArgument) return s;
      return Status::IOError(s.message(), true);
    }
    KVTIER_ASSIGN_OR_RETURN(SlotMap m, SlotMap::FromClusterSlots(ToReplyNode(&r), node));
    if (m.covered_slots() == 0) return Status::IOError("redis " + node.ToString() + ": no slot served", true);
    cluster_ = true;
    return m;
  }

  // The map to route with; refreshed first when a redirection or a failure made it stale.
  std::shared_ptr<const SlotMap> RoutingMap() {
    auto m = CurrentMap();
    bool old = false;
    {
      std::lock_guard lock(map_mu_);
      old = std::chrono::steady_clock::now() - map_loaded_ > opts_.map_max_age;
    }
    if (stale_.load() || old) {
      (void)Refresh(m.get());  // on failure keep routing with what is known
      m = CurrentMap();
    }
    return m;
  }

  void ApplyMoved(const Redirect& r) {
    std::lock_guard lock(map_mu_);
    auto copy = std::make_shared<SlotMap>(*map_);
    copy->Move(r.slot, r.node);
    map_ = std::move(copy);
    stale_ = true;
  }

  std::optional<NodeAddr> Target(const SlotMap& map, const Pending& p, bool read) {
    if (p.ask) return p.ask;
    const Shard* shard = map.ShardFor(p.slot);
    if (shard == nullptr) return std::nullopt;
    if (read && opts_.replica_reads && cluster_ && !p.master_only && !shard->replicas.empty()) {
      return shard->replicas[rr_++ % shard->replicas.size()];
    }
    return shard->master;
  }

  bool IsReplica(const SlotMap& map, const NodeAddr& node) const {
    for (const Shard& s : map.shards()) {
      for (const NodeAddr& r : s.replicas) {
        if (r == node && !(s.master == node)) return true;
      }
    }
    return false;
  }

  // Runs one command per key, pipelined per node, nodes in parallel; follows MOVED and ASK, reconnects
  // after a connection failure, up to kMaxRounds. Returns each command's Status.
  // `direct`: the GETs' ops, whose replies are read straight into their buffers; empty for other
  // commands (replies through hiredis).
  std::vector<Status> Run(const std::vector<std::string>& keys, bool read, const Encode& encode,
                          const Decode& decode, std::span<object::ObjectRead> direct = {}) {
    std::vector<Status> result(keys.size());
    std::vector<Pending> pending(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      pending[i].index = i;
      pending[i].slot = KeySlot(keys[i]);
    }
    for (int round = 0; round < kMaxRounds && !pending.empty(); ++round) {
      auto map = RoutingMap();
      std::map<NodeAddr, std::vector<Pending*>> groups;
      for (Pending& p : pending) {
        auto node = Target(*map, p, read);
        if (!node) {
          result[p.index] = Status::IOError("redis: no node serves slot " + std::to_string(p.slot), true);
          stale_ = true;
          continue;
        }
        groups[*node].push_back(&p);
      }
      std::vector<Outcome> outcome(keys.size());
      std::vector<std::thread> threads;
      size_t g = 0;
      for (auto& [node, ops] : groups) {
        const bool readonly = read && IsReplica(*map, node);
        auto job = [&, node = node, ops = &ops, readonly] {
          RunGroup(node, *ops, readonly, encode, decode, direct, result, outcome);
        };
        if (++g == groups.size() || !internal::TryStartThread(&threads, job)) job();
      }
      for (auto& t : threads) t.join();
      std::vector<Pending> next;
      for (Pending& p : pending) {
        const Outcome& o = outcome[p.index];
        if (o.kind == Outcome::Kind::kDone) continue;
        ++retries_;
        if (o.kind == Outcome::Kind::kMoved) {
          ApplyMoved(o.redirect);
          p.ask.reset();
        } else if (o.kind == Outcome::Kind::kAsk) {
          if (p.asked) continue;  // asked once already: the retryable error stands
          p.ask = o.redirect.node;
          p.asked = true;
        } else {
          stale_ = true;
          p.ask.reset();
          p.master_only = true;
        }
        next.push_back(p);
      }
      pending.swap(next);
    }
    for (const Status& s : result) {
      if (!s.ok() && !s.IsNotFound()) ++errors_;
    }
    return result;
  }

  void RunGroup(const NodeAddr& node, const std::vector<Pending*>& ops, bool readonly, const Encode& encode,
                const Decode& decode, std::span<object::ObjectRead> direct, std::vector<Status>& result,
                std::vector<Outcome>& outcome) {
    ConnPool& pool = readonly ? ro_pool_ : pool_;
    bool fresh = false;
    auto conn_or = pool.Acquire(node, &fresh);
    if (!conn_or.ok()) {
      for (const Pending* p : ops) {
        result[p->index] = conn_or.status();
        if (conn_or.status().retryable()) outcome[p->index].kind = Outcome::Kind::kConnFailed;
      }
      return;
    }
    std::unique_ptr<Conn> conn = std::move(conn_or).value();
    RespWriter w;
    for (const Pending* p : ops) {
      if (p->ask) {
        w.BeginCommand(1);
        w.Arg("ASKING");
      }
      encode(p->index, w);
    }
    Status s = conn->Write(w.iov());
    size_t done = 0;
    for (; s.ok() && done < ops.size(); ++done) {
      const Pending& p = *ops[done];
      if (p.ask) {
        s = direct.empty() ? conn->ReadReply().status() : conn->ReadDirect({}, {}, nullptr).status();
        ++requests_;
        if (!s.ok()) break;
      }
      s = direct.empty() ? ReadAndSettle(*conn, node, p, decode, result, outcome)
                         : ReadDirectAndSettle(*conn, node, p, direct[p.index], decode, result, outcome);
      ++requests_;
      if (!s.ok()) break;
    }
    for (; done < ops.size(); ++done) {
      result[ops[done]->index] = s;
      outcome[ops[done]->index].kind = Outcome::Kind::kConnFailed;
    }
    if (conn->broken() && !fresh) pool.DropIdle(node);  // the others idle on that node are as stale
    pool.Release(std::move(conn));
  }

  // Reads one reply through hiredis and settles its command; returns the read's failure (the
  // connection's), not the command's.
  Status ReadAndSettle(Conn& conn, const NodeAddr& node, const Pending& p, const Decode& decode,
                       std::vector<Status>& result, std::vector<Outcome>& outcome) {
    auto reply = conn.ReadReply();
    if (!reply.ok()) return reply.status();
    Settle(node, p, **reply, decode, result, outcome);
    return Status::OK();
  }

  // The same, reading the reply straight into `op`'s buffers. Settle and decode see it as the reply
  // hiredis would have made, but a bulk string's bytes are already in place (str is null).
  Status ReadDirectAndSettle(Conn& conn, const NodeAddr& node, const Pending& p, object::ObjectRead& op,
                             const Decode& decode, std::vector<Status>& result, std::vector<Outcome>& outcome) {
    auto reply = conn.ReadDirect(op.dst, op.rest, &op.wrote);
    if (!reply.ok()) return reply.status();
    redisReply r{};
    switch (reply->kind) {
      case DirectReply::Kind::kBulk: r.type = REDIS_REPLY_STRING; r.len = reply->len; break;
      case DirectReply::Kind::kNil: r.type = REDIS_REPLY_NIL; break;
      case DirectReply::Kind::kError: r.type = REDIS_REPLY_ERROR; break;
      case DirectReply::Kind::kStatus: r.type = REDIS_REPLY_STATUS; break;
      case DirectReply::Kind::kInteger: r.type = REDIS_REPLY_INTEGER; r.integer = reply->integer; break;
    }
    if (r.type == REDIS_REPLY_ERROR || r.type == REDIS_REPLY_STATUS) {
      r.str = reply->text.data();
      r.len = reply->text.size();
    }
    Settle(node, p, r, decode, result, outcome);
    return Status::OK();
  }

  void Settle(const NodeAddr& node, const Pending& p, const redisReply& r, const Decode& decode,
              std::vector<Status>& result, std::vector<Outcome>& outcome) {
    if (r.type != REDIS_REPLY_ERROR) {
      result[p.index] = decode(p.index, r);
      return;
    }
    const std::string_view err(r.str, r.len);
    result[p.index] = ErrorReplyStatus(err, node.ToString());
    if (auto redirect = ParseRedirect(err)) {
      outcome[p.index].kind =
          redirect->kind == Redirect::Kind::kMoved ? Outcome::Kind::kMoved : Outcome::Kind::kAsk;
      outcome[p.index].redirect = *redirect;
    } else if (result[p.index].retryable() && !result[p.index].IsNoSpace()) {
      stale_ = true;  // CLUSTERDOWN, TRYAGAIN, ...: the map may have changed; the caller retries
    }
  }

  Status ListNode(const NodeAddr& node, std::string_view prefix,
                  const std::function<bool(const object::ObjectInfo&)>& fn, bool* more) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, pool_.Acquire(node));
    Status s = ScanNode(*conn, prefix, fn, more);
    pool_.Release(std::move(conn));
    if (!s.ok()) ++errors_;
    return s;
  }

  Status ScanNode(Conn& conn, std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn,
                  bool* more) {
    const std::string full = Key(prefix);
    const std::string pattern = GlobEscape(full) + "*";
    const size_t strip = opts_.ns.empty() ? 0 : opts_.ns.size() + 1;
    std::string cursor = "0";
    do {
      const std::string_view argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
      KVTIER_ASSIGN_OR_RETURN(ReplyPtr r, conn.Command(argv));
      ++requests_;
      if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(std::string_view(r->str, r->len), conn.node().ToString());
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
          r->element[1]->type != REDIS_REPLY_ARRAY) {
        return Status::IOError("redis " + conn.node().ToString() + ": SCAN: unexpected reply");
      }
      cursor.assign(r->element[0]->str, r->element[0]->len);
      const redisReply& keys = *r->element[1];
      RespWriter w;
      for (size_t i = 0; i < keys.elements; ++i) {
        w.BeginCommand(2);
        w.Arg("STRLEN");
        w.Arg(std::string_view(keys.element[i]->str, keys.element[i]->len));
      }
      KVTIER_RETURN_IF_ERROR(conn.Write(w.iov()));
      std::vector<uint64_t> sizes;
      for (size_t i = 0; i < keys.elements; ++i) {
        KVTIER_ASSIGN_OR_RETURN(ReplyPtr len, conn.ReadReply());
        ++requests_;
        sizes.push_back(len->type == REDIS_REPLY_INTEGER && len->integer > 0 ? len->integer : 0);
      }
      for (size_t i = 0; i < keys.elements; ++i) {
        const std::string_view key(keys.element[i]->str, keys.element[i]->len);
        if (sizes[i] == 0 || key.size() < strip) continue;  // gone meanwhile (or not a string)
        if (!fn(object::ObjectInfo{std::string(key.substr(strip)), sizes[i]})) {
          *more = false;
          return Status::OK();
        }
      }
    } while (cursor != "0");
    return Status::OK();
  }

  const RedisOptions opts_;
  ConnPool pool_;
  ConnPool ro_pool_;
  mutable std::mutex map_mu_;
  std::mutex refresh_mu_;
  std::shared_ptr<const SlotMap> map_;
  std::chrono::steady_clock::time_point map_loaded_;
  std::atomic<bool> stale_{false};
  std::atomic<bool> cluster_{false};
  std::atomic<uint64_t> rr_{0};
  std::atomic<uint64_t> requests_{0}, retries_{0}, errors_{0};
};

}  // namespace

Result<std::unique_ptr<object::ObjectClient>> OpenRedisClient(const RedisOptions& options) {
  auto client = std::make_unique<RedisClient>(options);
  KVTIER_RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<object::ObjectClient>(std::move(client));
}

Result<std::unique_ptr<object::ObjectClient>> OpenRedisClient(const TierUrl& url,
                                                              const TierOpenOptions& open_options) {
  KVTIER_ASSIGN_OR_RETURN(RedisOptions o, ParseRedisOptions(url));
  o.read_only = open_options.read_only;
  return OpenRedisClient(o);
}

Result<std::unique_ptr<object::ObjectClient>> OpenRedisObjectClient(const TierUrl& url,
                                                                    const object::ObjectClientOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(RedisOptions o, ParseRedisOptions(url));
  if (options.timeout.count() > 0) o.timeout = options.timeout;
  if (options.connect_timeout.count() > 0) o.connect_timeout = options.connect_timeout;
  o.read_only = options.read_only;
  return OpenRedisClient(o);
}

}  // namespace kvtier::redis
