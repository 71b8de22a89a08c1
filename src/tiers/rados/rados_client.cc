#include "tiers/rados/rados_client.h"

#include <cerrno>
#include <ctime>
#include <vector>

#include "tiers/object/client_counters.h"
#include "tiers/rados/rados_conn.h"

namespace kvtier::rados {
namespace {

// A write in flight: its completion.
struct InFlight {
  rados_completion_t done = nullptr;
};

class RadosClient;

// A read in flight: its op, completion, compound read operation and what librados writes back.
struct ReadInFlight {
  RadosClient* client = nullptr;
  object::ObjectRead* op = nullptr;
  rados_completion_t done = nullptr;
  rados_read_op_t rop = nullptr;
  uint64_t size = 0;
  time_t mtime = 0;
  int stat_rval = 0;
  std::vector<std::span<std::byte>> pieces;  // where the object lands, in order
  std::vector<size_t> got;                   // bytes librados copied into each piece
  std::vector<int> rvals;

  static void OnComplete(rados_completion_t c, void* arg);
};

class RadosClient final : public object::ObjectClient {
 public:
  RadosClient(RadosOptions o, std::unique_ptr<RadosConn> conn) : opts_(std::move(o)), conn_(std::move(conn)) {}

  std::string Describe() const override {
    return "rados://" + opts_.pool + (opts_.ns.empty() ? "" : "/" + opts_.ns) + " (librados, " + opts_.cluster +
           " as client." + opts_.user + ")";
  }

  bool ScatterReads() const override { return true; }

  // Each object is one compound read operation: a stat, then one read per landing piece (the tier's
  // header buffer, then the caller's pieces, at their offsets in the object), so librados copies the
  // object straight into the caller's buffers. The completion's callback (librados' finisher thread)
  // ends the op and calls `landed` while the rest of the batch is still arriving.
  void GetMany(std::span<object::ObjectRead> ops) override {
    std::vector<ReadInFlight> fl(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      ReadInFlight& f = fl[i];
      f.client = this;
      f.op = &ops[i];
      f.pieces = object::LandingPieces(ops[i]);
      f.got.assign(f.pieces.size(), 0);
      f.rvals.assign(f.pieces.size(), 0);
      f.rop = rados_create_read_op();
      rados_read_op_stat(f.rop, &f.size, &f.mtime, &f.stat_rval);
      uint64_t offset = 0;
      for (size_t k = 0; k < f.pieces.size(); ++k) {
        rados_read_op_read(f.rop, offset, f.pieces[k].size(), reinterpret_cast<char*>(f.pieces[k].data()), &f.got[k],
                           &f.rvals[k]);
        offset += f.pieces[k].size();
      }
      counters_.Requests();
      rados_aio_create_completion2(&f, &ReadInFlight::OnComplete, &f.done);
      ops[i].status = Status::OK();  // before the operation is queued: its callback may end it at once
      Start(f.done, rados_aio_read_op_operate(f.rop, conn_->io(), f.done, ops[i].name.c_str(), 0), ops[i].status);
    }
    for (ReadInFlight& f : fl) {
      if (f.done != nullptr) {
        rados_aio_wait_for_complete_and_cb(f.done);  // the callback has ended the op
        rados_aio_release(f.done);
      }
      rados_release_read_op(f.rop);
    }
  }

  void PutMany(std::span<object::ObjectWrite> ops) override {
    std::vector<InFlight> fl(ops.size());
    std::vector<rados_write_op_t> wops(ops.size(), nullptr);
    for (size_t i = 0; i < ops.size(); ++i) {
      auto& op = ops[i];
      if (opts_.read_only) {
        op.status = Status::NotSupported("rados: the tier is open read-only");
        continue;
      }
      wops[i] = rados_create_write_op();
      bool first = true;
      for (const auto& piece : op.data) {
        const char* p = reinterpret_cast<const char*>(piece.data());
        if (first) {
          rados_write_op_write_full(wops[i], p, piece.size());  // replaces the object whole
        } else if (!piece.empty()) {
          rados_write_op_append(wops[i], p, piece.size());
        }
        first = false;
      }
      if (first) rados_write_op_write_full(wops[i], "", 0);
      // FULL_TRY: on a full pool or cluster librados fails the write (ENOSPC, EDQUOT) instead of
      // holding it until space comes back: a put fails softly and the Store moves on.
      op.status = Status::OK();
      Start(fl[i].done,
            rados_aio_write_op_operate(wops[i], conn_->io(), Completion(fl[i]), op.name.c_str(), nullptr,
                                       LIBRADOS_OPERATION_FULL_TRY),
            op.status);
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (wops[i] == nullptr) continue;
      const int r = Finish(fl[i]);
      rados_release_write_op(wops[i]);
      if (!ops[i].status.ok()) continue;
      ops[i].status = r < 0 ? Failed(r, "write " + ops[i].name) : Status::OK();
    }
  }

  Status Delete(std::string_view name) override {
    if (opts_.read_only) return Status::NotSupported("rados: the tier is open read-only");
    counters_.Requests();
    const std::string n(name);
    const int r = rados_remove(conn_->io(), n.c_str());
    if (r == -ENOENT) return Status::OK();
    return r < 0 ? Failed(r, "remove " + n) : Status::OK();
  }

  Result<bool> Exists(std::string_view name) override {
    counters_.Requests();
    const std::string n(name);
    uint64_t size = 0;
    time_t mtime = 0;
    const int r = rados_stat(conn_->io(), n.c_str(), &size, &mtime);
    if (r == -ENOENT) return false;
    if (r < 0) return Failed(r, "stat " + n);
    return true;
  }

  Status List(std::string_view prefix, const std::function<bool(const object::ObjectInfo&)>& fn) override {
    rados_list_ctx_t ctx = nullptr;
    counters_.Requests();
    int r = rados_nobjects_list_open(conn_->io(), &ctx);
    if (r < 0) return Failed(r, "list pool " + opts_.pool);
    Status s;
    while (true) {
      const char* entry = nullptr;
      size_t entry_size = 0;
      r = rados_nobjects_list_next2(ctx, &entry, nullptr, nullptr, &entry_size, nullptr, nullptr);
      if (r == -ENOENT) break;  // the end of the listing
      if (r < 0) {
        s = Failed(r, "list pool " + opts_.pool);
        break;
      }
      const std::string name(entry, entry_size);
      if (!name.starts_with(prefix)) continue;
      uint64_t size = 0;
      time_t mtime = 0;
      counters_.Requests();
      const int st = rados_stat(conn_->io(), name.c_str(), &size, &mtime);
      if (st == -ENOENT) continue;  // removed since it was listed
      if (st < 0) {
        s = Failed(st, "stat " + name);
        break;
      }
      if (!fn(object::ObjectInfo{name, size})) break;
    }
    rados_nobjects_list_close(ctx);
    return s;
  }

  object::ObjectClientStats Stats() const override { return counters_.Snapshot(); }

 private:
  rados_completion_t Completion(InFlight& f) {
    counters_.Requests();
    rados_aio_create_completion2(nullptr, nullptr, &f.done);
    return f.done;
  }
  // After an operate call: an operation that could not be queued is failed now (its completion fires
  // never and is released at once).
  void Start(rados_completion_t& done, int queued, Status& status) {
    if (queued < 0) {
      status = Failed(queued, "queue an operation");
      rados_aio_release(done);
      done = nullptr;
    }
  }
  int Finish(InFlight& f) { return f.done == nullptr ? 0 : WaitAndRelease(f.done); }

 public:
  // Ends a read from its compound operation's results (librados' finisher thread).
  void EndRead(ReadInFlight& f, int r) {
    object::ObjectRead& op = *f.op;
    if (r == -ENOENT) {  // the whole operation failed at the stat: nothing was copied
      op.bytes = 0;
      op.status = Status::NotFound("rados: no object " + op.name);
      return;
    }
    uint64_t landed = 0;
    for (size_t k = 0; k < f.pieces.size() && r >= 0; ++k) {
      if (f.rvals[k] < 0) r = f.rvals[k];
      landed += f.got[k];
    }
    op.wrote = op.wrote || landed > 0 || r < 0;  // a failed operation may have copied some pieces
    if (r < 0) {
      op.bytes = 0;
      op.status = Failed(r, "read " + op.name);
      return;
    }
    object::CompleteLanding(op, f.size, landed, "rados");
  }

 private:
  Status Failed(int r, const std::string& what) {
    counters_.Error();
    return RadosStatus(r, what);
  }

  const RadosOptions opts_;
  const std::unique_ptr<RadosConn> conn_;
  object::ClientCounters counters_;
};

void ReadInFlight::OnComplete(rados_completion_t c, void* arg) {
  auto* f = static_cast<ReadInFlight*>(arg);
  f->client->EndRead(*f, rados_aio_get_return_value(c));
}

}  // namespace

Result<RadosOptions> ParseRadosOptions(const TierUrl& url) {
  RadosOptions o;
  for (const char* secret : {"key", "secret", "password"}) {
    if (url.params.contains(secret)) {
      return Status::InvalidArgument("rados:// never takes a key in the URL: use keyring=FILE");
    }
  }
  std::string_view path = url.path;
  const size_t slash = path.find('/');
  o.pool = std::string(path.substr(0, slash));
  if (slash != std::string_view::npos) o.ns = std::string(path.substr(slash + 1));
  if (o.pool.empty()) return Status::InvalidArgument("rados:// needs a pool: rados://POOL[/NAMESPACE]?conf=...");
  if (o.ns.find('/') != std::string::npos) return Status::InvalidArgument("rados: namespace '" + o.ns + "' has a '/'");
  auto get = [&](const char* name, std::string* out) {
    if (auto it = url.params.find(name); it != url.params.end()) *out = it->second;
  };
  get("conf", &o.conf);
  get("user", &o.user);
  get("keyring", &o.keyring);
  get("cluster", &o.cluster);
  if (o.user.empty() || o.user.starts_with("client.")) {
    return Status::InvalidArgument("rados: user= is the client id without 'client.' (e.g. user=admin)");
  }
  return o;
}

Result<std::unique_ptr<object::ObjectClient>> OpenRadosClient(const RadosOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RadosConn> conn, RadosConn::Open(options));
  return std::unique_ptr<object::ObjectClient>(std::make_unique<RadosClient>(options, std::move(conn)));
}

Result<std::unique_ptr<object::ObjectClient>> OpenRadosObjectClient(const TierUrl& url,
                                                                    const object::ObjectClientOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(RadosOptions o, ParseRadosOptions(url));
  o.read_only = options.read_only;
  if (options.timeout.count() > 0) o.timeout = options.timeout;
  if (options.connect_timeout.count() > 0) o.connect_timeout = options.connect_timeout;
  return OpenRadosClient(o);
}

}  // namespace kvtier::rados
