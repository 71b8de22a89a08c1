// file:///DIR?capacity=SIZE&sync=BOOL&direct=BOOL&inflight=SIZE: the local-NVMe tier.
//
// One file per chunk at DIR/<namespace hex>/<key hex[0:2]>/<key hex>.kvc in the format of
// core/chunk_format.h, published atomically (temporary name + rename). The index is rebuilt from the
// directory at open, so a restart keeps the cache; leftovers of interrupted writes are removed then.
// Usage (the sum of chunk file sizes) never exceeds capacity: least recently used chunks are evicted,
// also at open when a restart brings a smaller capacity. Hits refresh a file's mtime (at most once a
// second per chunk), so LRU order survives restarts. Reads go through io_uring with O_DIRECT where
// the kernel and filesystem allow, else a preadv thread pool; every chunk is verified before its bytes
// reach the caller, and one that fails is removed, counted and reported as Corruption.
//
// Options:
//   capacity  bytes on disk the tier may use. Recorded in DIR/kvtier.capacity; when the URL gives none
//             the recorded figure applies (so `kvtier inspect --target file:///DIR` never evicts a
//             cache opened with a larger capacity), else 10GiB (kDefaultFileCapacity)
//   sync      fsync each chunk and its directory before publishing (default false)
//   direct    read with O_DIRECT where accepted (default true)
//   inflight  bound on bytes read but not yet verified and copied out (default 256MiB)
// Unknown options are an InvalidArgument.
//
// One engine process per directory: two writers sharing one DIR would each enforce the capacity on
// their own view (use fs:// for a pool shared by several processes or hosts). Tools such as
// `kvtier verify` may open it beside the engine: open leaves the temporaries of live writers alone.
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <memory>
#include <string>

#include "io/chunk_io.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

inline constexpr uint64_t kDefaultFileCapacity = 10ull << 30;
inline constexpr std::string_view kCapacityFileName = "kvtier.capacity";

struct FileTierOptions {
  std::string dir;
  uint64_t capacity_bytes = 0;  // 0: the capacity recorded in DIR, else kDefaultFileCapacity
  bool sync = false;
  ReaderOptions reader;  // direct_io is cleared at open when the filesystem refuses O_DIRECT
};

// Opens (creating DIR if needed) and scans. InvalidArgument for bad options; IOError when DIR cannot
// be created or read.
Result<std::unique_ptr<Tier>> OpenFileTier(const TierUrl& url);
Result<std::unique_ptr<Tier>> OpenFileTier(const FileTierOptions& options);

// Parses the options of a file:// URL.
Result<FileTierOptions> ParseFileTierUrl(const TierUrl& url);

// What a file:// tier found at open and which read engine it uses (tests and `kvtier stats`).
struct FileTierReport {
  std::string io_engine;       // ChunkReader::engine()
  uint64_t temp_removed = 0;   // leftovers of interrupted writes removed at open
  uint64_t bad_size_removed = 0;
  uint64_t open_evictions = 0; // chunks evicted at open to honour the capacity
};
// REQUIRES: `tier` was opened by OpenFileTier. Empty report otherwise.
FileTierReport GetFileTierReport(const Tier& tier);

// Tests only: flips the first payload byte of chunk `id` on disk under `dir`, behind the tier's back.
// NotFound when the chunk's file does not exist.
Status CorruptFileChunkForTesting(const std::string& dir, const ChunkId& id);

}  // namespace kvtier::internal
