// Store: the engine-facing object. It keeps chunks in an ordered list of tiers (fastest first), finds
// the longest cached prefix of a prompt, loads it straight into the caller's buffers, and saves new
// chunks without making the caller wait for slow storage.
//
// Thread-safety: every method may be called from many threads at once.
//
// Typical use:
//   StoreOptions opt;
//   opt.tiers = {"mem://?capacity=4GiB", "file:///var/lib/kvtier?capacity=200GiB"};
//   auto store = Store::Open(opt);                     // Result<std::unique_ptr<Store>>
//   auto keys = ComputeChunkKeys(ns, prompt_tokens);
//   size_t n = (*store)->Lookup(ns, keys);             // leading chunks available in some tier
//   auto loaded = (*store)->Load(ns, first_n_keys, destinations);  // verified prefix actually loaded
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/borrowed_chunk.h"
#include "kvtier/events.h"
#include "kvtier/host_allocator.h"
#include "kvtier/keys.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier {

// When a chunk saved into the top tier is also written to the lower tiers.
enum class Admission : uint8_t {
  kAlways = 0,     // every saved chunk goes down
  kSecondUse = 1,  // only once the chunk has been saved or loaded a second time (spares SSD writes)
};

struct StoreOptions {
  // Tier URLs, fastest first. At least one.
  std::vector<std::string> tiers;
  // Copy chunks loaded from a lower tier into the top tier. It happens in the background, after Load
  // has returned: a queue worker reads the chunk again from the tier that served it (a job of the
  // same bounded queue as saves; when the queue is full the promotion is skipped and counted in
  // StoreStats::promotions_dropped).
  bool promote_on_load = true;
  Admission admission = Admission::kAlways;
  // Bound on the background write queue to lower tiers; a save that would exceed it is dropped
  // (counted in StoreStats::dropped_saves), never waited for. A queued save holds its chunk in the top
  // tier until its write reads it; one the top tier cannot hold (a quarter of it is held already) carries
  // a copy, whose bytes this bound also limits.
  uint64_t save_queue_bytes = 1ull << 30;
  uint32_t save_queue_chunks = 4096;
  // Threads that write the lower tiers, one chunk each at a time: the chunks in flight to the disk. Eight
  // keep a disk as busy as fio's 8 requests of a chunk each (docs/qualification.md, bench save); a chunk
  // the top tier can lend costs a writer no memory, one it cannot costs it a buffer of the chunk's size.
  uint32_t background_threads = 8;
  // Absolute path of a key file (32 raw bytes or 64 hex characters, mode 0600 or stricter). When set,
  // every tier but mem:// (file://, fs://, object tiers) stores AES-256-GCM encrypted, authenticated
  // chunks under a key derived per namespace, and accepts no others (docs/encryption.md). Added to those URLs as
  // key_file=; a URL that names a different key_file is refused. Never logged.
  std::string key_file;
  // Where the tiers take their large host buffers from (the mem:// arena, file:// / fs:// bounce
  // slabs), e.g. PinnedHostAllocator() (kvtier/gpu.h) for a GPU's copies; null: DefaultHostAllocator()
  // (heap memory for the slabs). Ignored by Open(tiers, options).
  std::shared_ptr<HostAllocator> host_allocator = nullptr;
  // Told of every chunk a tier of this Store stores, loses to Remove or evicts (kvtier/events.h), e.g. an
  // EventPublisher; null: no events. Called on the storing thread: it must never block.
  std::shared_ptr<ChunkObserver> observer = nullptr;
  // Open every tier only to look (TierOpenOptions::read_only; `kvtier serve`): Save and Remove then
  // fail in every tier, and nothing on storage changes. Ignored by Open(tiers, options).
  bool read_only = false;
};

// What a Store counted for one namespace (or, past the first kMaxTrackedNamespaces, for all later ones
// together).
struct NamespaceStats {
  static constexpr size_t kMaxTrackedNamespaces = 64;
  // The first 16 hex characters of the namespace id, or "other" for namespaces past the limit.
  std::string label;
  uint64_t lookups = 0, lookup_chunks = 0, lookup_tokens = 0;  // asked for in Lookup
  uint64_t hit_chunks = 0, hit_tokens = 0;                     // found by Lookup (its return value)
  uint64_t loads = 0, load_chunks = 0, load_bytes = 0;         // Load calls, chunks and bytes loaded
  uint64_t saves = 0, save_chunks = 0;                         // Save calls and chunks given to them
  LatencyBuckets load_latency;  // per Load call
  LatencyBuckets save_latency;  // per Save call
};

struct StoreStats {
  std::vector<TierStats> tiers;
  // In order of first use; at most NamespaceStats::kMaxTrackedNamespaces + 1 entries (the last "other").
  std::vector<NamespaceStats> namespaces;
  uint64_t lookups = 0, lookup_chunks_hit = 0, lookup_chunks_missed = 0;
  uint64_t loads = 0, load_chunks = 0, load_bytes = 0;
  // Of load_bytes, those not read: window groups' bytes of chunks that hold none of the last `window`
  // tokens of their load's prefix, skipped where the serving tier reads ranges (Store::Load).
  uint64_t load_bytes_skipped = 0;
  uint64_t saves = 0, save_chunks = 0;
  uint64_t promotions = 0;          // chunks copied into a faster tier (after a load or a prefetch)
  uint64_t promotions_dropped = 0;  // promotions after a load skipped: queue full or source gone
  uint64_t borrows = 0;             // chunks lent by Borrow
  uint64_t queued_saves = 0;     // written to lower tiers in the background
  uint64_t dropped_saves = 0;    // not written to lower tiers: queue full or write failed
  uint64_t queue_bytes_now = 0;  // background queue backlog
  uint64_t queue_chunks_now = 0; // background queue backlog, in jobs (one chunk each)
  LatencySummary load_latency;   // per Load call
  LatencySummary save_latency;   // per Save call
  // Chunk events (StoreOptions::observer): told to the observer, and what the observer reports.
  bool observed = false;          // an observer is set
  uint64_t events = 0;            // events given to the observer
  uint64_t events_published = 0;  // ChunkObserverStats::published
  uint64_t events_dropped = 0;    // ChunkObserverStats::dropped
  uint32_t event_subscribers = 0; // ChunkObserverStats::subscribers
};

// What Store::LoadWithProgress reports while it runs. Landed(chunk, bytes): the first `bytes` bytes of
// chunk `chunk` (an index into the load's keys) are verified and in its destination; per chunk `bytes`
// only grows. Called from kvtier's reading threads, for a chunk under a lock of that chunk: it must be
// quick and must not call back into the Store.
class LoadProgress {
 public:
  virtual ~LoadProgress() = default;
  virtual void Landed(size_t chunk, uint64_t bytes) = 0;
};

class Store {
 public:
  // Opens every tier of `options.tiers`. InvalidArgument for bad options or URLs; the first tier's
  // error otherwise.
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  // Uses tiers the caller opened (e.g. wrapped for fault injection); options.tiers is ignored.
  static Result<std::unique_ptr<Store>> Open(std::vector<std::unique_ptr<Tier>> tiers,
                                             const StoreOptions& options);

  // Waits for the background queue, then stops the workers.
  virtual ~Store() = default;

  // Number of leading `keys` present in some tier (not yet verified: Load may still return fewer).
  virtual size_t Lookup(const Namespace& ns, std::span<const ChunkKey> keys) = 0;

  // Reads chunks 0..n-1 in parallel from the fastest tier holding each, verifies them, and writes
  // chunk i into dsts[i] (whose total size must be ns.layout().BytesPerChunk()). Returns how many
  // leading chunks were loaded: if chunk i cannot be read from any tier, chunks after i are not used.
  // The destinations of chunks that were read but not reported loaded are zeroed, so a failed or
  // corrupt load leaves no byte of any other chunk there.
  // The last tier is not asked whether it holds a chunk before reading it (its read says so): keys
  // past a chunk no tier holds may then be read and discarded, so pass the prefix Lookup returned.
  // Sliding-window layers (a layout's `window` groups, docs/models.md "Sliding-window loads"): a
  // group's bytes of a chunk that holds none of the last `window` tokens of the returned prefix are not
  // read where the serving tier reads ranges (every tier not in memory; counted in
  // StoreStats::load_bytes_skipped): they are left untouched in dsts[i]. Where the tier reads whole
  // chunks (mem://, shm://) they hold the chunk's bytes. Either way an engine must not use them; every
  // other byte of a loaded chunk is verified and in place. A per-sequence state (`state` groups) is
  // read and verified in every chunk: a chunk whose state is missing or corrupt ends the prefix.
  // InvalidArgument when keys and dsts differ in length or a destination has the wrong size.
  virtual Result<size_t> Load(const Namespace& ns, std::span<const ChunkKey> keys,
                              std::span<const ScatterList> dsts) = 0;

  // Load, reporting to `progress` (when not null) how far each chunk has landed while the load runs, so
  // an engine can use a chunk's first layers (the chunk's leading bytes) before the rest has landed.
  // What is reported is verified: a tier that checks pieces as they land (file://, fs://: the per-piece
  // checksums of the chunk format; mem://: its copies) reports each piece, any other tier the whole
  // chunk once read. A chunk that fails after some of its bytes were reported is not read again from a
  // slower tier: the load ends before it (those bytes are zeroed and it is not counted loaded), so an
  // engine that used them learns from the returned count that the chunk failed.
  virtual Result<size_t> LoadWithProgress(const Namespace& ns, std::span<const ChunkKey> keys,
                                          std::span<const ScatterList> dsts, LoadProgress* progress) = 0;

  // Copies each chunk into the top tier and returns; lower tiers are written in the background.
  // Never blocks on slow storage: when the background queue is full the chunk is dropped for the lower
  // tiers and counted. InvalidArgument when keys and srcs differ in length or a source has the wrong
  // size. A failure of the top tier is returned; the lower tiers may still receive the chunk.
  virtual Status Save(const Namespace& ns, std::span<const ChunkKey> keys,
                      std::span<const GatherList> srcs) = 0;

  // Lends chunk `key` in place from the fastest tier holding it that can (mem://): a verified,
  // read-only view pinned until the BorrowedChunk is released (kvtier/borrowed_chunk.h), so a GPU
  // copy or a socket reads straight from the tier. NotFound when no lending tier holds it (Load
  // copies from any tier); Corruption when the copy failed verification (it is removed).
  // REQUIRES: released before the Store is destroyed.
  virtual Result<BorrowedChunk> Borrow(const Namespace& ns, const ChunkKey& key) = 0;

  // Promotes the leading available chunks into the top tier in the background.
  virtual void Prefetch(const Namespace& ns, std::span<const ChunkKey> keys) = 0;

  // Removes the chunks of `keys` from every tier. A background write (save or promotion) of one of
  // them that is still queued is dropped, and one that is running is waited for, so the removal is not
  // undone by a write that began before it: a Lookup after Remove misses them until they are saved
  // again. A dropped background save counts neither as queued nor as dropped. Returns the first tier's
  // failure (the other tiers are still asked).
  virtual Status Remove(const Namespace& ns, std::span<const ChunkKey> keys) = 0;

  // Waits until every queued background write has finished, then flushes every tier.
  virtual Status Flush() = 0;

  virtual StoreStats Stats() const = 0;

  virtual size_t tier_count() const = 0;
  virtual Tier& tier(size_t index) = 0;
};

}  // namespace kvtier
