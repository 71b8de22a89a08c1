#include "tiers/object/object_tier.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/threads.h"
#include "core/chunk_format.h"
#include "core/latency.h"
#include "io/chunk_encode.h"
#include "io/read_common.h"
#include "tiers/object/object_names.h"
#include "tiers/object/object_retry.h"

namespace kvtier::object {
namespace {

void Zero(ScatterList dst) {
  for (const auto& piece : dst) {
    if (!piece.empty()) std::memset(piece.data(), 0, piece.size());
  }
}

uint64_t ObjectBytes(ScatterList dst) { return internal::kChunkHeaderSize + TotalBytes(dst); }

// The largest object a chunk can be: anything bigger is not fetched.
constexpr uint64_t kMaxObjectBytes = internal::kChunkHeaderSize + internal::kMaxChunkPayload;

// Takes `bytes` (at most the whole budget) from `budget` for the life of the guard.
class BudgetGuard {
 public:
  BudgetGuard(internal::ByteBudget& budget, uint64_t bytes)
      : budget_(budget), bytes_(std::min(bytes, budget.limit())) {
    budget_.Acquire(bytes_);
  }
  ~BudgetGuard() { budget_.Release(bytes_); }
  BudgetGuard(const BudgetGuard&) = delete;
  BudgetGuard& operator=(const BudgetGuard&) = delete;

 private:
  internal::ByteBudget& budget_;
  const uint64_t bytes_;
};

}  // namespace

ObjectTier::ObjectTier(std::unique_ptr<ObjectClient> client, ObjectTierOptions options, std::string url,
                       bool read_only)
    : client_(std::move(client)),
      options_(std::move(options)),
      url_(std::move(url)),
      read_only_(read_only),
      budget_(options_.inflight_bytes),
      index_(read_only ? 0 : options_.capacity_bytes) {}

Status ObjectTier::Init() {
  if (options_.capacity_bytes == 0 && !read_only_) return Status::OK();
  // Learn what is stored, so the capacity bounds it across restarts and `stats` shows it. Over the
  // capacity (a smaller capacity= than before), the surplus is deleted now.
  std::vector<std::string> surplus;
  KVTIER_RETURN_IF_ERROR(client_->List(ChunkNamePrefix(options_.prefix), [&](const ObjectInfo& info) {
    if (!ParseChunkObjectName(options_.prefix, info.name)) return true;
    bool added = false;
    auto victims = index_.Add(info.name, info.bytes, &added);
    if (!victims.ok()) {
      surplus.push_back(info.name);
    } else {
      for (auto& v : *victims) surplus.push_back(std::move(v));
    }
    return true;
  }));
  for (const auto& name : surplus) {
    if (read_only_) break;
    (void)client_->Delete(name);  // best effort: a later Put makes room again
    counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  }
  return Status::OK();
}

TierCapabilities ObjectTier::capabilities() const {
  TierCapabilities c;
  c.persistent = true;
  c.shared = true;
  c.read_only = read_only_;
  return c;
}

bool ObjectTier::Contains(const ChunkId& id) {
  auto found = client_->Exists(ChunkObjectName(options_.prefix, id));
  return found.ok() && *found;
}

void ObjectTier::CountRetries(const RetryCounts& counts) {
  tier_retries_.fetch_add(counts.retried_ops, std::memory_order_relaxed);
  gave_up_.fetch_add(counts.gave_up, std::memory_order_relaxed);
}

Status ObjectTier::Put(const ChunkId& id, GatherList payload) {
  if (read_only_) return Status::NotSupported("tier " + url_ + " is open read-only");
  auto encoded = std::make_unique<internal::EncodedChunk>();
  Status s = internal::EncodeChunk(id, payload, options_.cipher.get(), encoded.get());
  const std::string name = ChunkObjectName(options_.prefix, id);
  bool added = false;
  std::vector<std::string> victims;
  if (s.ok()) {
    auto made = index_.Add(name, encoded->bytes, &added);
    if (made.ok()) victims = std::move(made).value();
    s = made.status();
  }
  if (!s.ok()) {
    counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  for (const auto& v : victims) {
    (void)client_->Delete(v);  // best effort: the index no longer counts it either way
    counters_.evictions.fetch_add(1, std::memory_order_relaxed);
    if (auto evicted = ParseChunkObjectName(options_.prefix, v)) NotifyEvicted(*evicted);
  }
  ObjectWrite write{name, encoded->parts, Status::OK()};
  {
    BudgetGuard guard(budget_, encoded->bytes);
    CountRetries(RunWithRetries<ObjectWrite>(std::span(&write, 1), options_.retry,
                                             [this](std::span<ObjectWrite> w) { client_->PutMany(w); }));
  }
  if (!write.status.ok()) {
    if (added) index_.Erase(name);
    counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
    return write.status;
  }
  counters_.puts.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_written.fetch_add(encoded->bytes, std::memory_order_relaxed);
  return Status::OK();
}

Status ObjectTier::Get(const ChunkId& id, ScatterList dst) {
  ReadOp op{id, dst, Status::OK()};
  GetMany(std::span(&op, 1));
  return op.status;
}

namespace {

struct Window {
  std::span<ReadOp> ops;
  uint64_t bytes = 0;
};

// Cuts `ops` into windows of whole chunks whose objects add up to at most `limit` (at least one chunk
// each).
std::vector<Window> CutWindows(std::span<ReadOp> ops, uint64_t limit) {
  std::vector<Window> windows;
  size_t begin = 0;
  while (begin < ops.size()) {
    uint64_t bytes = ObjectBytes(ops[begin].dst);
    size_t end = begin + 1;
    while (end < ops.size() && bytes + ObjectBytes(ops[end].dst) <= limit) bytes += ObjectBytes(ops[end++].dst);
    windows.push_back(Window{ops.subspan(begin, end - begin), bytes});
    begin = end;
  }
  return windows;
}

// The order in which to read `ops` by the servers the client places them on (each server's ops in
// their own order). `interleave`: round-robin over the servers, so that a window, and the two windows
// in flight, spread over as many servers as they can instead of queueing on one while another idles;
// otherwise (one object at a time) server after server, each kept busy while its turn lasts. Empty
// when the client places an op nowhere (Placement 0) or every op on one server: the caller's order.
std::vector<size_t> SpreadOrder(const ObjectClient& client, const std::string& prefix, std::span<const ReadOp> ops,
                                bool interleave) {
  std::vector<uint64_t> servers;  // in order of first appearance
  std::vector<std::vector<size_t>> of_server;
  for (size_t i = 0; i < ops.size(); ++i) {
    const uint64_t server = client.Placement(ChunkObjectName(prefix, ops[i].id));
    if (server == 0) return {};
    const size_t k = static_cast<size_t>(std::find(servers.begin(), servers.end(), server) - servers.begin());
    if (k == servers.size()) {
      servers.push_back(server);
      of_server.emplace_back();
    }
    of_server[k].push_back(i);
  }
  if (servers.size() < 2) return {};
  std::vector<size_t> order;
  order.reserve(ops.size());
  if (!interleave) {
    for (const std::vector<size_t>& list : of_server) order.insert(order.end(), list.begin(), list.end());
    return order;
  }
  for (size_t round = 0; order.size() < ops.size(); ++round) {
    for (const std::vector<size_t>& list : of_server) {
      if (round < list.size()) order.push_back(list[round]);
    }
  }
  return order;
}

}  // namespace

void ObjectTier::GetMany(std::span<ReadOp> ops) {
  if (ops.size() < 2) return ReadInWindows(ops);
  const std::vector<size_t> order = SpreadOrder(*client_, options_.prefix, ops, Overlaps(ops));
  if (order.empty()) return ReadInWindows(ops);
  std::vector<ReadOp> spread;
  spread.reserve(ops.size());
  for (size_t i : order) spread.push_back(ops[i]);
  ReadInWindows(spread);
  for (size_t k = 0; k < order.size(); ++k) ops[order[k]].status = std::move(spread[k].status);
}

bool ObjectTier::Overlaps(std::span<const ReadOp> ops) const {
  return ops.size() > 1 && ObjectBytes(ops[0].dst) <= options_.inflight_bytes / 2;
}

void ObjectTier::ReadInWindows(std::span<ReadOp> ops) {
  if (ops.empty()) return;
  // Two windows of at most half the bound each are in flight at once, so that while one window's last
  // objects arrive and are verified the next one's requests are already out; where two chunks do not
  // fit in the bound, one window of up to the whole bound at a time.
  const bool overlap = Overlaps(ops);
  const std::vector<Window> windows = CutWindows(ops, overlap ? options_.inflight_bytes / 2 : options_.inflight_bytes);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t w; (w = next.fetch_add(1)) < windows.size();) {
      BudgetGuard guard(budget_, windows[w].bytes);
      ReadWindow(windows[w].ops);
    }
  };
  if (!overlap || windows.size() < 2) return work();
  std::vector<std::thread> second;
  (void)internal::TryStartThread(&second, work);  // refused: this thread reads every window
  work();
  for (auto& t : second) t.join();
}

void ObjectTier::ReadWindow(std::span<ReadOp> ops) {
  const auto start = std::chrono::steady_clock::now();
  // A client that scatters gets a header-sized buffer per op and the caller's pieces: the payload lands
  // in place. Otherwise each object lands whole in staging and is copied out once verified.
  const bool scatter = client_->ScatterReads();
  uint64_t staging_bytes = 0;
  for (const ReadOp& op : ops) staging_bytes += scatter ? internal::kChunkHeaderSize : ObjectBytes(op.dst);
  auto staging = std::make_unique_for_overwrite<std::byte[]>(staging_bytes);
  std::vector<ObjectRead> reads(ops.size());
  // Each object is verified as it lands, on the client's thread that read it, while the rest of the
  // window is still in flight; `verdict[i]` is that result, `verified[i]` says it was reached.
  std::vector<Status> verdict(ops.size());
  std::vector<uint8_t> verified(ops.size(), 0);
  uint64_t offset = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const uint64_t n = scatter ? internal::kChunkHeaderSize : ObjectBytes(ops[i].dst);
    reads[i].name = ChunkObjectName(options_.prefix, ops[i].id);
    reads[i].dst = {staging.get() + offset, n};
    if (scatter) reads[i].rest = ops[i].dst;
    reads[i].landed = [this, &op = ops[i], &v = verdict[i], &done = verified[i]](ObjectRead& r) {
      v = Verify(op, r);
      done = 1;
    };
    offset += n;
  }
  CountRetries(RunWithRetries<ObjectRead>(reads, options_.retry,
                                          [this](std::span<ObjectRead> r) { client_->GetMany(r); }));
  for (size_t i = 0; i < ops.size(); ++i) {
    FinishRead(ops[i], reads[i], verified[i] ? &verdict[i] : nullptr);
    counters_.get_latency.Record(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
}

Status ObjectTier::Verify(const ReadOp& op, const ObjectRead& read) const {
  if (read.bytes > read.Capacity()) return Status::Internal("object client reported more bytes than it copied");
  if (read.rest.empty()) {
    return internal::VerifyObjectImage(read.dst.first(read.bytes), op.id, op.dst, options_.cipher.get());
  }
  return internal::VerifyObjectInPlace(read.dst, read.bytes, op.id, op.dst, options_.cipher.get());
}

void ObjectTier::FinishRead(ReadOp& op, ObjectRead& read, const Status* verdict) {
  op.status = VerifyRead(op, read, verdict);
  if (op.status.ok()) {
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_read.fetch_add(TotalBytes(op.dst), std::memory_order_relaxed);
    index_.Touch(read.name);
    return;
  }
  if (op.status.IsNotFound()) {  // nothing was copied: the destination holds the caller's bytes
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Zero(op.dst);
  if (op.status.IsCorruption()) DropCorrupt(read.name);
}

Status ObjectTier::VerifyRead(ReadOp& op, ObjectRead& read, const Status* verdict) {
  if (!read.status.ok()) {
    if (read.status.IsNotFound() && read.wrote && !read.rest.empty()) {
      // An earlier try landed part of the object in the caller's buffers before failing: not a plain
      // miss, whose destination would be left as the caller's own bytes.
      return Status::IOError("object " + read.name + " vanished while being read", /*retryable=*/true);
    }
    if (read.status.code() != Code::kInvalidArgument || read.bytes <= read.Capacity()) return read.status;
    // Larger than this chunk's object: a chunk of another size (the caller's mistake) or damage.
    KVTIER_ASSIGN_OR_RETURN(std::vector<std::byte> whole, FetchWhole(read.name));
    return internal::VerifyObjectImage(whole, op.id, op.dst, options_.cipher.get());
  }
  return verdict != nullptr ? *verdict : Verify(op, read);
}

Result<std::vector<std::byte>> ObjectTier::FetchWhole(const std::string& name) {
  auto get = [this](std::span<ObjectRead> r) { client_->GetMany(r); };
  ObjectRead probe{name, {}, 0, Status::OK()};  // an empty destination: the client reports the size
  CountRetries(RunWithRetries<ObjectRead>(std::span(&probe, 1), options_.retry, get));
  if (!probe.status.ok() && !(probe.status.code() == Code::kInvalidArgument && probe.bytes > 0)) return probe.status;
  if (probe.bytes > kMaxObjectBytes) {
    return Status::Corruption("object " + name + " holds " + std::to_string(probe.bytes) +
                              " bytes, more than any chunk");
  }
  // Not taken from the budget: the caller may hold some of it already, and this path is rare.
  std::vector<std::byte> buf(probe.bytes);
  ObjectRead full{name, buf, 0, Status::OK()};
  CountRetries(RunWithRetries<ObjectRead>(std::span(&full, 1), options_.retry, get));
  if (full.status.code() == Code::kInvalidArgument) {
    return Status::IOError("object " + name + " grew while being read", /*retryable=*/true);
  }
  KVTIER_RETURN_IF_ERROR(full.status);
  buf.resize(std::min<uint64_t>(full.bytes, buf.size()));
  return buf;
}

void ObjectTier::DropCorrupt(const std::string& name) {
  counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
  if (read_only_) return;
  (void)client_->Delete(name);  // best effort: a damaged object that stays fails verification again
  index_.Erase(name);
}

namespace {
struct DeleteOp {
  std::string name;
  Status status;
};
}  // namespace

Status ObjectTier::Remove(const ChunkId& id) {
  if (read_only_) return Status::NotSupported("tier " + url_ + " is open read-only");
  DeleteOp op{ChunkObjectName(options_.prefix, id), Status::OK()};
  CountRetries(RunWithRetries<DeleteOp>(std::span(&op, 1), options_.retry, [this](std::span<DeleteOp> ops) {
    for (DeleteOp& d : ops) d.status = client_->Delete(d.name);
  }));
  if (op.status.ok()) index_.Erase(op.name);
  return op.status;
}

Status ObjectTier::List(const std::function<bool(const ChunkInfo&)>& fn) {
  return client_->List(ChunkNamePrefix(options_.prefix), [&](const ObjectInfo& info) {
    const auto id = ParseChunkObjectName(options_.prefix, info.name);
    if (!id) return true;  // not a chunk of this tier: skipped
    return fn(ChunkInfo{*id, info.bytes});
  });
}

Status ObjectTier::Check(const ChunkInfo& info) {
  const std::string name = ChunkObjectName(options_.prefix, info.id);
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::byte> whole, FetchWhole(name));
  Status s;
  if (whole.size() < internal::kChunkHeaderSize) {
    s = Status::Corruption("object " + name + " is shorter than a chunk header");
  } else {
    std::vector<std::byte> scratch(whole.size() - internal::kChunkHeaderSize);
    const std::span<std::byte> out(scratch);
    s = internal::VerifyObjectImage(whole, info.id, ScatterList(&out, 1), options_.cipher.get());
  }
  if (s.IsCorruption()) DropCorrupt(name);
  return s;
}

TierStats ObjectTier::Stats() const {
  TierStats s;
  s.url = url_;
  counters_.FillInto(s);
  s.chunks = index_.size();
  s.usage_bytes = index_.usage();
  s.capacity_bytes = index_.capacity();
  return s;
}

ObjectTierReport ObjectTier::Report() const {
  ObjectTierReport r;
  r.client = client_->Describe();
  r.client_stats = client_->Stats();
  r.tier_retries = tier_retries_.load(std::memory_order_relaxed);
  r.gave_up = gave_up_.load(std::memory_order_relaxed);
  r.inflight_bytes = options_.inflight_bytes;
  return r;
}

ObjectTierReport GetObjectTierReport(const Tier& tier) {
  const auto* o = dynamic_cast<const ObjectTier*>(&tier);
  return o == nullptr ? ObjectTierReport{} : o->Report();
}

}  // namespace kvtier::object
