// Tier: one interface for every kind of storage a chunk can live in (memory, local NVMe, a shared
// pool, ...). Tiers are opened from URLs through a registry:
//   mem://?capacity=8GiB
//   file:///var/lib/kvtier?capacity=200GiB
//
// A tier stores whole chunks. Every implementation keeps the invariants of docs/architecture.md:
// a chunk becomes visible only once complete; a chunk that fails verification is removed and reported
// as Corruption, never returned as data; usage never exceeds capacity.
//
// Thread-safety: every method of a Tier may be called from many threads at once.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/borrowed_chunk.h"
#include "kvtier/host_allocator.h"
#include "kvtier/keys.h"
#include "kvtier/status.h"

namespace kvtier {

// Identifies one stored chunk. The layout fingerprint is checked against the stored header.
struct ChunkId {
  Digest ns{};
  ChunkKey key{};
  uint64_t layout_fingerprint = 0;
  // How a writer cuts the payload into verified pieces (Layout::InternedPieceLengths of a grouped
  // layout: alive until the process exits), so that a reader of some heads reads whole pieces; null:
  // the format's default pieces. A hint for writers, not part of the identity: ignored by ==, and by
  // tiers that keep no pieces. A plain pointer keeps ChunkId trivially copyable.
  const std::vector<uint64_t>* piece_lengths = nullptr;

  static ChunkId Of(const Namespace& ns, const ChunkKey& key) {
    return ChunkId{ns.id(), key, ns.fingerprint(), ns.piece_lengths()};
  }
  bool operator==(const ChunkId& o) const {
    return ns == o.ns && key == o.key && layout_fingerprint == o.layout_fingerprint;
  }
};

// A chunk's bytes spread over several caller buffers (e.g. one per layer in an engine's paged pool).
// The pieces are filled, or read, in order; their sizes add up to the chunk's payload size.
using ScatterList = std::span<const std::span<std::byte>>;
using GatherList = std::span<const std::span<const std::byte>>;

size_t TotalBytes(ScatterList pieces);
size_t TotalBytes(GatherList pieces);

// Where a tier may report, while it reads one chunk, which bytes of the destination already hold
// verified bytes of that chunk, so that an engine can use a chunk's first layers before its last ones
// have landed (Store::LoadWithProgress). A tier reports a range only once every byte of it is verified
// and in the destination, and writes those bytes again only if the read then fails (the Tier::Get
// contract zeroes a failed read's destination; the Store then reports the chunk as not loaded).
// Reporting is optional: a tier that reports nothing has its chunk reported whole when its read returns.
// Thread-safety: Verified may be called from any thread, for ranges in any order.
class ReadProgress {
 public:
  virtual ~ReadProgress() = default;
  // Bytes [offset, offset + len) of the chunk's payload are verified and in the destination.
  virtual void Verified(uint64_t offset, uint64_t len) = 0;
};

// One read of a batch; `status` is set by the tier: OK, NotFound, Corruption or an I/O error.
// `progress`, when set, receives the ranges verified as the read goes (see ReadProgress).
struct ReadOp {
  ChunkId id;
  ScatterList dst;
  Status status;
  ReadProgress* progress = nullptr;
};

struct TierCapabilities {
  bool in_memory = false;   // Put is a memory copy: cheap enough to run on the caller's thread
  bool persistent = false;  // survives a restart of the process
  bool shared = false;      // other processes and hosts see the same chunks
  bool direct_io = false;   // reads bypass the page cache
  bool read_only = false;   // opened only to look: Put and Remove fail, nothing on storage changes
};

// How a tier is opened.
struct TierOpenOptions {
  // Only to look (`kvtier inspect`, `stats`, `verify`): the tier must already exist; nothing on storage
  // is created, written, evicted, touched or removed, whatever the URL says (a capacity= binds only
  // a writer); Put and Remove fail with NotSupported; Check and Get report corrupt chunks and leave
  // them in place.
  bool read_only = false;
  // Where large host buffers come from (the mem:// arena; file:// and fs:// readers' bounce slab
  // segments); null: DefaultHostAllocator() for the arena, heap memory for the slab.
  std::shared_ptr<HostAllocator> host_allocator = nullptr;
};

struct LatencySummary {
  uint64_t count = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
};

// Fixed upper bounds, in seconds, of the exported latency buckets (LatencyBuckets); a last bucket, +Inf,
// follows them.
inline constexpr std::array<double, 17> kLatencyBucketBounds = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

// A latency histogram at kLatencyBucketBounds, cumulative like Prometheus' `le`: cumulative[i] counts the
// observations of at most kLatencyBucketBounds[i] seconds, and the last entry (+Inf) counts them all.
struct LatencyBuckets {
  std::array<uint64_t, kLatencyBucketBounds.size() + 1> cumulative{};
  double sum_seconds = 0;  // of every observation
  uint64_t count() const { return cumulative.back(); }
};

struct TierStats {
  std::string url;
  uint64_t hits = 0, misses = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t puts = 0, put_errors = 0;
  uint64_t evictions = 0;
  uint64_t corrupt = 0;        // chunks that failed verification (and were removed)
  uint64_t dropped_saves = 0;  // filled in by Store::Stats: background writes to this tier not made
  uint64_t chunks = 0;         // chunks stored now
  uint64_t usage_bytes = 0;    // bytes counted against capacity
  uint64_t capacity_bytes = 0; // 0 = unbounded
  LatencySummary get_latency;  // per chunk Get
  LatencyBuckets get_latency_buckets;  // the same observations at fixed bounds
  // Metadata round trips to storage (fs://: stat, open, fstat; 0 where a tier keeps its index in memory).
  uint64_t metadata_ops = 0;
  // How reads reach storage and why, where a tier chooses at open (fs://: "O_DIRECT (...)" or
  // "buffered (...)" with the probe's figures); empty elsewhere.
  std::string read_mode;
};

struct ChunkInfo {
  ChunkId id;                 // layout_fingerprint may be 0 where only the name is known
  uint64_t stored_bytes = 0;  // bytes counted against capacity
};

class Tier {
 public:
  virtual ~Tier() = default;

  virtual const std::string& url() const = 0;
  virtual TierCapabilities capabilities() const = 0;

  // True when a complete chunk is stored under `id` (it is verified only when read).
  virtual bool Contains(const ChunkId& id) = 0;
  // Contains for a batch: present[i] for ids[i]. REQUIRES: equal sizes. Default: one Contains each;
  // tiers whose presence costs a round trip answer a batch at once.
  virtual void ContainsMany(std::span<const ChunkId> ids, std::span<bool> present);

  // Stores a chunk, replacing nothing: storing a key twice keeps one copy. Evicts least recently
  // used chunks to make room. NoSpace when the chunk can never fit; IOError on storage failure.
  // On failure nothing becomes visible.
  virtual Status Put(const ChunkId& id, GatherList payload) = 0;

  // Reads and verifies a chunk into `dst` (whose total size must equal the payload size).
  // NotFound on a miss; Corruption when the stored bytes fail verification (the chunk is removed);
  // InvalidArgument when `dst` has the wrong size. On NotFound `dst` is untouched; on any other failure
  // it is zeroed: no byte of a bad, foreign or partly read chunk is left in it.
  virtual Status Get(const ChunkId& id, ScatterList dst) = 0;

  // Reads a batch in parallel where the tier can; sets each op's status. Default: one Get at a time.
  virtual void GetMany(std::span<ReadOp> ops);

  // Reads only `ranges` of the chunk's payload, whose whole size is `chunk_bytes` (e.g. a
  // tensor-parallel rank's heads, Layout::HeadRanges): `dst` receives the ranges' bytes one after the
  // other. The ranges are non-empty, ascending and disjoint. Every stored piece a range touches is read
  // and verified, and no other where the tier reads pieces (file://); the default Gets the whole chunk
  // into a temporary buffer and copies the ranges out. Errors and `dst` on failure as Get;
  // InvalidArgument for bad ranges or a chunk of another size.
  virtual Status GetRanges(const ChunkId& id, uint64_t chunk_bytes, std::span<const ByteRange> ranges,
                           ScatterList dst);

  // A verified, read-only view of a stored chunk in the tier's own memory, pinned until released
  // (kvtier/borrowed_chunk.h). NotFound on a miss; Corruption when it fails verification (removed);
  // NotSupported (the default) where chunks do not live in this process's memory.
  virtual Result<BorrowedChunk> Borrow(const ChunkId& id);

  // Keeps a chunk the caller has just stored from eviction until the hold is released (a Store holds
  // the chunk it queued for a copy to a slower tier until that copy has read it). Unlike Borrow it is
  // no use of the chunk: its place in the eviction order and the hit counters stay as they are. Where
  // the tier verifies reads (mem://?verify=1) a hold is verified as a Borrow is: Corruption, and the
  // chunk removed, when it fails. A tier holds at most a quarter of its capacity at once, so holds never
  // leave a Put without room: past that, NoSpace (retryable). NotFound when the chunk is not there
  // (already evicted); NotSupported (the default) where chunks do not live in this process's memory.
  virtual Result<BorrowedChunk> Hold(const ChunkId& id);

  // The long-lived host memory Borrow's views lie in, valid while the tier is open, which a GPU process
  // may page-lock once (PinStoreHostMemory, kvtier/gpu.h) so that GPU loads copy borrowed chunks straight
  // from it. Empty (the default) where the tier lends nothing or its memory is pinned another way.
  virtual std::vector<std::span<std::byte>> HostRegions();

  // Removes a chunk; OK if it was not there.
  virtual Status Remove(const ChunkId& id) = 0;

  // Calls `fn` for each stored chunk until it returns false. Chunks stored concurrently may be missed.
  virtual Status List(const std::function<bool(const ChunkInfo&)>& fn) = 0;

  // Verifies one stored chunk against its own header; on failure counts it, removes it (unless the
  // tier is read-only) and returns Corruption. NotFound if it is gone.
  virtual Status Check(const ChunkInfo& info) = 0;

  // Makes completed Puts durable according to the tier's policy.
  virtual Status Flush() { return Status::OK(); }

  virtual TierStats Stats() const = 0;

  // A namespace's description (the canonical encoding of its engine identity, kvtier/engine_identity.h),
  // kept beside its chunks once, for `kvtier inspect` only: never trusted for anything else. Tiers
  // without a place for it (the default) keep nothing and return OK; a read-only tier refuses.
  virtual Status DescribeNamespace(const Digest& ns, std::string_view text);
  // The description kept for `ns`: NotFound when there is none (or the tier keeps none), Corruption
  // when what is there is not a description.
  virtual Result<std::string> NamespaceDescription(const Digest& ns);

  // Told of each chunk the tier evicts to make room under its capacity (never of Remove, nor of a
  // corrupt chunk it drops), for the Store's chunk events (kvtier/events.h). Called on the evicting
  // thread, possibly with the tier's lock held: it must be quick, never block and never call the tier.
  using EvictionListener = std::function<void(const ChunkId&)>;
  // Set before the tier is shared between threads (Store::Open does); a wrapper passes it on.
  virtual void SetEvictionListener(EvictionListener listener) { eviction_listener_ = std::move(listener); }

 protected:
  // For implementations: reports one evicted chunk to the listener, if any.
  void NotifyEvicted(const ChunkId& id) const {
    if (eviction_listener_) eviction_listener_(id);
  }

 private:
  EvictionListener eviction_listener_;
};

// A parsed tier URL: scheme://path?name=value&name=value
struct TierUrl {
  std::string scheme;
  std::string path;
  std::map<std::string, std::string> params;

  // InvalidArgument on malformed input (no scheme, bad escapes, duplicate or empty parameter names) and
  // on a path that is neither empty nor absolute: "file://relative/dir" and "file://~/kv" are refused
  // with a message naming the absolute form (the host part of a URL is not used; file:///abs/dir).
  // redis:// is the exception: its path is its node list, host:port[,host:port...].
  static Result<TierUrl> Parse(std::string_view url);
  std::string ToString() const;

  // Typed parameter access; InvalidArgument when present but malformed, or above `max_value`. Sizes
  // accept "4GiB", "512MiB", "100MB", "123" (bytes); numbers are whole decimal numbers. Both are
  // computed exactly: a value that does not fit in 64 bits is an error, never wrapped or rounded.
  Result<uint64_t> GetSize(const std::string& name, uint64_t default_value,
                           uint64_t max_value = UINT64_MAX) const;
  Result<uint64_t> GetUint(const std::string& name, uint64_t default_value,
                           uint64_t max_value = UINT64_MAX) const;
  Result<bool> GetBool(const std::string& name, bool default_value) const;
  // InvalidArgument naming the first parameter not in `known`: a misspelt option is an error.
  Status CheckKnown(std::initializer_list<std::string_view> known) const;
};

// Parses "4GiB", "512 MiB", "2TB", "1.5GiB", "4096" exactly (no floating point); InvalidArgument
// otherwise, and for anything above 2^64 - 1 bytes.
Result<uint64_t> ParseSize(std::string_view text);
// Parses "600", "600s", "10m", "2h", "1d"; InvalidArgument otherwise, and above 100 years (36525d), so
// any accepted duration fits std::chrono::nanoseconds.
Result<std::chrono::seconds> ParseDuration(std::string_view text);
std::string FormatBytes(uint64_t bytes);  // "1.50 GiB"

using TierFactory = std::function<Result<std::unique_ptr<Tier>>(const TierUrl&, const TierOpenOptions&)>;

// Registers a scheme; later registrations of the same scheme replace earlier ones. Thread-safe.
void RegisterTierScheme(const std::string& scheme, TierFactory factory);

// Opens a tier from its URL. InvalidArgument for a malformed URL or an unknown scheme (the message lists
// the known ones); otherwise whatever the tier's factory returns.
Result<std::unique_ptr<Tier>> OpenTier(std::string_view url, const TierOpenOptions& options = {});

}  // namespace kvtier
