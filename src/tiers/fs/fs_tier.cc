#include "tiers/fs/fs_tier.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "core/threads.h"
#include "core/latency.h"
#include "core/tier_counters.h"
#include "core/thread_annotations.h"
#include "tiers/fs/counting_fs.h"
#include "tiers/fs/pool_gc.h"
#include "tiers/fs/pool_layout.h"
#include "tiers/fs/pool_publish.h"
#include "tiers/fs/read_probe.h"
#include "tiers/fs/ttl_key_set.h"
#include "io/chunk_io.h"

namespace kvtier::internal {
namespace {

// Whether the median of `window` (its upper middle element) is above `limit`.
template <size_t N>
bool MedianAbove(std::array<std::chrono::steady_clock::duration, N> window, std::chrono::microseconds limit) {
  std::nth_element(window.begin(), window.begin() + N / 2, window.end());
  return window[N / 2] > limit;
}

// Another process may have changed the pool since the last measurement: never wrap below zero.
void SubClamped(std::atomic<uint64_t>& a, uint64_t d) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur - std::min(cur, d), std::memory_order_relaxed)) {
  }
}

class FsTier final : public Tier {
 public:
  FsTier(FsTierOptions options, std::string url, std::unique_ptr<ChunkDir> pool, ReadModeChoice read_mode,
         std::shared_ptr<CountingFileSystem> counted)
      : options_(std::move(options)),
        url_(std::move(url)),
        pool_(std::move(pool)),
        counted_(std::move(counted)),
        read_mode_(std::move(read_mode)),
        reader_(ChunkReader::Create(ReaderOptions{.max_inflight_bytes = options_.inflight_bytes,
                                                  .direct_io = read_mode_.direct,
                                                  .use_io_uring = options_.io_uring,
                                                  .verify_threads = options_.verify_threads,
                                                  .cipher = options_.cipher,
                                                  .host_allocator = options_.host_allocator})),
        missing_(options_.neg_ttl, options_.neg_entries),
        present_(options_.pos_ttl, options_.neg_entries),
        touched_(options_.touch_interval, options_.neg_entries) {}

  // Seeds the usage figures: with a capacity, a pass that measures the pool and evicts down to it
  // (a restart with a smaller capacity shrinks the pool); without one, the last gc's figure.
  Status Init();

  const std::string& url() const override { return url_; }

  TierCapabilities capabilities() const override {
    return TierCapabilities{.in_memory = false,
                            .persistent = true,
                            .shared = true,
                            .direct_io = ReadsDirect(),
                            .read_only = options_.read_only};
  }

  bool Contains(const ChunkId& id) override {
    if (missing_.Contains(id)) return false;
    if (present_.Contains(id)) return true;  // seen a moment ago; a stale hit costs only a miss at Load
    auto st = pool_->StatChunk(id);
    if (st.ok() && st->type == FileType::kRegular) {
      present_.Insert(id);
      return true;
    }
    if (!st.ok() && st.status().IsNotFound()) missing_.Insert(id);
    return false;
  }

  // A batch is stat'ed on this thread while the filesystem answers fast (a local disk answers in
  // microseconds, less than starting a thread costs); once the median stat of a window of
  // kSerialProbe takes a network round trip, the rest run on a few threads at once, so a Lookup of
  // many chunks waits for about one round trip instead of one per chunk. The median, not the mean: on
  // a busy host one stat that waited milliseconds for a CPU made the mean look like a network, and
  // eight threads started on busy cores cost far more than the stats they share.
  void ContainsMany(std::span<const ChunkId> ids, std::span<bool> present) override {
    const size_t n = std::min(ids.size(), present.size());
    std::array<std::chrono::steady_clock::duration, kSerialProbe> window{};
    auto last = StatClock();
    size_t i = 0;
    while (i < n) {
      present[i] = Contains(ids[i]);
      const auto now = StatClock();
      window[i % kSerialProbe] = now - last;
      last = now;
      ++i;
      if (i % kSerialProbe == 0 && MedianAbove(window, kSlowStat)) break;
    }
    const unsigned threads = static_cast<unsigned>(std::min<size_t>(kStatThreads, (n - i) / 2));
    if (threads <= 1) {
      for (; i < n; ++i) present[i] = Contains(ids[i]);
      return;
    }
    std::atomic<size_t> next{i};
    auto work = [&] {
      for (size_t k = next++; k < n; k = next++) present[k] = Contains(ids[k]);
    };
    std::vector<std::thread> helpers;
    helpers.reserve(threads - 1);
    for (unsigned t = 1; t < threads && TryStartThread(&helpers, work); ++t) {
    }
    work();
    for (auto& h : helpers) h.join();
  }

  Status Put(const ChunkId& id, GatherList payload) override;

  Status Get(const ChunkId& id, ScatterList dst) override {
    ScopedLatency timer(&counters_.get_latency);
    ReadOp op{id, dst, Status::OK()};
    ReadBatch(std::span<ReadOp>(&op, 1));
    return op.status;
  }

  void GetMany(std::span<ReadOp> ops) override {
    BatchLatency timer(&counters_.get_latency, ops.size());
    ReadBatch(ops);
  }

  Status Remove(const ChunkId& id) override {
    if (options_.read_only) return Status::NotSupported("Remove refused: " + url_ + " is opened read-only");
    auto st = pool_->StatChunk(id);
    KVTIER_RETURN_IF_ERROR(pool_->RemoveChunk(id));
    if (st.ok()) Forget(st->size);
    present_.Erase(id);
    missing_.Insert(id);
    return Status::OK();
  }

  Status List(const std::function<bool(const ChunkInfo&)>& fn) override {
    return pool_->Walk([&](const WalkEntry& e) {
      if (e.kind != EntryKind::kChunk || e.stat.type != FileType::kRegular) return true;
      return fn(ChunkInfo{e.id, e.stat.size});
    });
  }

  Status Check(const ChunkInfo& info) override {
    auto header = VerifyChunkFile(pool_->fs(), pool_->ChunkPath(info.id), info.id, options_.cipher.get());
    if (header.ok()) return Status::OK();
    if (!header.status().IsCorruption()) return header.status();
    const Status removed = RemoveCorrupt(info.id);
    if (!removed.ok()) {
      return Status::IOError(header.status().message() + "; the corrupt chunk could not be removed: " +
                             removed.ToString());
    }
    return header.status();
  }

  TierStats Stats() const override;
  Status DescribeNamespace(const Digest& ns, std::string_view text) override {
    return pool_->WriteNamespaceFile(ns, text);
  }
  Result<std::string> NamespaceDescription(const Digest& ns) override { return pool_->ReadNamespaceFile(ns); }

 private:
  bool ReadsDirect() const {
    return read_mode_.direct && reader_->engine().find("O_DIRECT") != std::string_view::npos;
  }
  void ReadBatch(std::span<ReadOp> ops);
  // Accounts for one finished read and applies its consequences.
  void Finish(ChunkRead& read, ReadOp* op);
  // Makes room for `stored` more bytes under the capacity and reserves them.
  Status Reserve(uint64_t stored);
  // One gc pass down to `max_bytes`; refreshes the usage figures.
  Status EvictTo(uint64_t max_bytes) REQUIRES(evict_mu_);
  Status RemoveCorrupt(const ChunkId& id);  // OK when removed, gone, or read-only (then left)
  void Forget(uint64_t stored) {
    SubClamped(usage_, stored);
    SubClamped(chunks_, 1);
  }

  // Recency for gc is the file's mtime; refreshing it is a metadata write (an RPC on NFS), so each
  // process does it at most once per touch interval per chunk. Best effort: failure changes nothing.
  void Touch(const ChunkId& id) {
    if (options_.read_only || touched_.Contains(id)) return;
    pool_->TouchChunk(id);
    touched_.Insert(id);
  }

  const FsTierOptions options_;
  const std::string url_;
  const std::unique_ptr<ChunkDir> pool_;
  const std::shared_ptr<CountingFileSystem> counted_;  // the pool's filesystem, counting metadata calls
  const ReadModeChoice read_mode_;  // how the reader reads this mount, and why (fs/read_probe.h)
  const std::unique_ptr<ChunkReader> reader_;
  std::chrono::steady_clock::time_point StatClock() const {
    return options_.stat_clock ? options_.stat_clock() : std::chrono::steady_clock::now();
  }

  static constexpr size_t kStatThreads = 8;
  static constexpr size_t kSerialProbe = 8;  // stats per window timed on the caller's thread
  static constexpr std::chrono::microseconds kSlowStat{50};  // median stat time that means a network
  TtlKeySet missing_;  // negative-lookup cache
  TtlKeySet present_;  // positive-lookup cache: chunks stat'ed, written or read a moment ago
  TtlKeySet touched_;  // chunks whose mtime this process refreshed recently

  // This process's view of the pool: the last pass's measurement plus its own puts and removes since.
  std::atomic<uint64_t> usage_{0}, chunks_{0};
  Mutex evict_mu_;  // one eviction pass at a time in this process (gc's flock is per open file)

  TierCounters counters_;
};

Status FsTier::Init() {
  KVTIER_RETURN_IF_ERROR(reader_->status());  // e.g. verify_threads=64 under a process limit
  if (options_.capacity_bytes == 0 || options_.read_only || options_.repair) {  // a repair never evicts
    auto u = ReadPoolUsage(*pool_);
    if (u.ok()) {
      usage_ = u->bytes;
      chunks_ = u->chunks;
    }
    return Status::OK();
  }
  MutexLock lock(evict_mu_);
  Status s = EvictTo(options_.capacity_bytes);
  if (s.code() != Code::kBusy) return s;
  // Another gc is evicting right now: measure without removing anything.
  auto r = CollectPoolGarbage(*pool_, GcOptions{.max_bytes = UINT64_MAX, .dry_run = true});
  if (!r.ok()) return r.status();
  usage_ = r->bytes_after;
  chunks_ = r->chunks_after;
  return Status::OK();
}

Status FsTier::Put(const ChunkId& id, GatherList payload) {
  if (options_.read_only) return Status::NotSupported("Put refused: " + url_ + " is opened read-only");
  const uint64_t stored = StoredChunkBytes(TotalBytes(payload));
  if (pool_->StatChunk(id).ok()) {  // one copy is enough; any writer's copy is whole
    missing_.Erase(id);
    return Status::OK();
  }
  Status s = Reserve(stored);
  if (s.ok()) {
    // Written with O_DIRECT from the caller's pages when they lie on 4 KiB boundaries and the pool is
    // read with O_DIRECT (the probe found it correct here), else through the page cache.
    auto written = PublishChunk(*pool_, id, payload,
                                WriteOptions{.sync = options_.sync, .direct = ReadsDirect(),
                                             .io_uring = options_.io_uring, .cipher = options_.cipher});
    if (written.ok()) {
      missing_.Erase(id);
      present_.Insert(id);
      if (written->already_there) {  // another writer's copy won the link; ours is gone
        Forget(stored);
        return Status::OK();
      }
      counters_.puts.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_written.fetch_add(written->stored_bytes, std::memory_order_relaxed);
      return Status::OK();
    }
    Forget(stored);
    s = written.status();
  }
  counters_.put_errors.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Status FsTier::Reserve(uint64_t stored) {
  const uint64_t cap = options_.capacity_bytes;
  if (cap == 0) {
    usage_.fetch_add(stored, std::memory_order_relaxed);
    chunks_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  if (stored > cap) {
    return Status::NoSpace("chunk of " + FormatBytes(stored) + " exceeds the pool capacity " + FormatBytes(cap));
  }
  MutexLock lock(evict_mu_);
  if (usage_.load() + stored > cap) {
    // Evict to 90% so a full pool is not rescanned for every Put.
    const uint64_t low_water = cap - cap / 10;
    KVTIER_RETURN_IF_ERROR(EvictTo(low_water > stored ? low_water - stored : 0));
    if (usage_.load() + stored > cap) {
      return Status::NoSpace("pool " + pool_->root() + " is full of chunks being written");
    }
  }
  usage_.fetch_add(stored, std::memory_order_relaxed);
  chunks_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status FsTier::EvictTo(uint64_t max_bytes) {
  auto r = CollectPoolGarbage(*pool_, GcOptions{.max_bytes = max_bytes, .policy = options_.policy},
                              [this](const GcAction& a) {
    if (a.reason == GcReason::kEvict) NotifyEvicted(a.id);
  });
  if (!r.ok()) return r.status();
  if (r->chunks_evicted > 0) present_.Clear();  // which ones went is not reported: forget every hit
  usage_ = r->bytes_after;
  chunks_ = r->chunks_after;
  counters_.evictions.fetch_add(r->chunks_evicted, std::memory_order_relaxed);
  return Status::OK();
}

Status FsTier::RemoveCorrupt(const ChunkId& id) {
  // A writer may have renamed a good copy over it since; removing that one costs only a miss.
  counters_.corrupt.fetch_add(1, std::memory_order_relaxed);
  present_.Erase(id);
  if (options_.read_only) return Status::OK();  // reported, left in place
  auto st = pool_->StatChunk(id);
  const Status removed = pool_->RemoveChunk(id);
  if (removed.ok() && st.ok()) Forget(st->size);
  return removed;
}

void FsTier::ReadBatch(std::span<ReadOp> ops) {
  std::vector<ChunkRead> reads;
  std::vector<ReadOp*> targets;
  reads.reserve(ops.size());
  for (ReadOp& op : ops) {
    if (missing_.Contains(op.id)) {
      op.status = Status::NotFound("chunk not in pool " + pool_->root() + " (recently missing)");
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    reads.push_back(
        ChunkRead{&pool_->fs(), pool_->ChunkPath(op.id), op.id, op.dst, Status::OK(), 0, op.progress});
    targets.push_back(&op);
  }
  if (!reads.empty()) reader_->ReadMany(reads);
  for (size_t i = 0; i < reads.size(); ++i) Finish(reads[i], targets[i]);
}

void FsTier::Finish(ChunkRead& read, ReadOp* op) {
  op->status = std::move(read.status);
  if (op->status.ok()) {
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes_read.fetch_add(TotalBytes(op->dst), std::memory_order_relaxed);
    Touch(op->id);
    present_.Insert(op->id);
    return;
  }
  counters_.misses.fetch_add(1, std::memory_order_relaxed);
  present_.Erase(op->id);
  if (op->status.IsNotFound()) {
    missing_.Insert(op->id);
  } else if (op->status.IsCorruption()) {
    (void)RemoveCorrupt(op->id);
  }
}

TierStats FsTier::Stats() const {
  TierStats st;
  st.url = url_;
  counters_.FillInto(st);
  st.chunks = chunks_.load(std::memory_order_relaxed);
  st.usage_bytes = usage_.load(std::memory_order_relaxed);
  st.capacity_bytes = options_.capacity_bytes;
  st.metadata_ops = counted_->metadata_ops();
  ReadModeChoice shown = read_mode_;
  if (shown.direct && !ReadsDirect()) {
    shown.direct = false;
    shown.reason += "; the reader (" + std::string(reader_->engine()) + ") could not use O_DIRECT";
  }
  st.read_mode = DescribeReadMode(shown);
  return st;
}

}  // namespace

Result<std::unique_ptr<Tier>> OpenFsTierWithOptions(const FsTierOptions& options, std::string url) {
  std::shared_ptr<FileSystem> inner = options.fs;
  if (inner == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(inner, OpenPosixFileSystem(options.root, PosixFsOptions{.create = options.create &&
                                                                                             !options.read_only}));
  }
  auto counted = std::make_shared<CountingFileSystem>(std::move(inner));
  KVTIER_ASSIGN_OR_RETURN(auto pool, OpenPool(options.root, ChunkDirOptions{.read_only = options.read_only,
                                                                            .create = options.create,
                                                                            .fs = counted}));
  ReadModeChoice mode = ChooseReadMode(*pool, ReadProbeOptions{.mode = options.direct,
                                                                .read_only = options.read_only,
                                                                .io_uring = options.io_uring,
                                                                .inflight_bytes = options.inflight_bytes,
                                                                .verify_threads = options.verify_threads,
                                                                .timed = options.fs == nullptr});
  auto tier = std::make_unique<FsTier>(options, std::move(url), std::move(pool), std::move(mode), std::move(counted));
  KVTIER_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<Tier>(std::move(tier));
}

Result<std::unique_ptr<Tier>> OpenFsTier(const TierUrl& url, const TierOpenOptions& open) {
  KVTIER_ASSIGN_OR_RETURN(FsTierOptions options, ParseFsTierOptions(url));
  options.read_only = open.read_only;
  options.host_allocator = open.host_allocator;
  return OpenFsTierWithOptions(options, url.ToString());
}

Status CorruptPoolChunkForTesting(const std::string& root, const ChunkId& id) {
  KVTIER_ASSIGN_OR_RETURN(auto pool, OpenPool(root, ChunkDirOptions{.read_only = true}));
  return pool->CorruptChunkForTesting(id, kChunkHeaderSize + 1);
}

std::string PoolChunkPathForTesting(const std::string& root, const ChunkId& id) {
  return root + "/" + ChunkRelPath(PoolDirSpec(), id);
}

}  // namespace kvtier::internal
