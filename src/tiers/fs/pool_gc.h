// Garbage collection of a shared pool: evicts least recently used chunks until the pool fits a size,
// and removes temporary files left by writers that died.
//
// Safe while other processes read and write the pool:
//  - a reader that opened a chunk before it is unlinked reads it whole; one that opens it after gets
//    NotFound (a miss, never wrong bytes);
//  - a writer that renames a chunk into place after gc unlinked it simply publishes it again;
//  - temporaries younger than the grace period belong to live writers and are left alone;
//  - a chunk whose recency or inode changed since the scan (read or rewritten meanwhile) is skipped.
//  - a chunk-named file whose size no chunk can have, or that is not a regular file, is corrupt: it is
//    removed first and never counted, so a stray huge (or sparse) file never evicts good chunks;
//  - only kvtier's own names are removed; links, special files and foreign names are counted and left.
// Recency is max(mtime, atime): fs:// refreshes mtime on hits, and atime counts where it is kept.
// With policy=window (core/eviction_policy.h) a chunk whose mtime is more than a second past its
// creation (statx btime: a reader refreshed it) is in main, the others in the window; gc then evicts
// the window first while it holds more than its share of max_bytes, as mem:// does. There is no ghost
// here (files record no eviction), and where the filesystem keeps no creation time every chunk is in
// the window: plain LRU.
// One gc runs per pool at a time (flock on <root>/GC.lock); a second gets Busy.
// Empty fan-out directories are kept: removing one would race with a writer creating its temporary.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "core/eviction_policy.h"
#include "io/chunk_dir.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct GcOptions {
  uint64_t max_bytes = 0;                 // evict until chunks + live temporaries fit
  std::chrono::seconds grace{600};        // temporaries older than this are stale
  bool dry_run = false;                   // report, remove nothing, write nothing
  EvictionPolicy policy = EvictionPolicy::kLru;  // the order of evictions (above)
};

enum class GcReason { kEvict, kStaleTemp, kCorrupt };

struct GcAction {
  std::string path;
  uint64_t bytes = 0;
  GcReason reason = GcReason::kEvict;
  int64_t idle_s = 0;  // seconds since last use (evictions) or since last write (temporaries)
  ChunkId id;          // kEvict: the chunk's namespace and key (layout fingerprint 0: not read)
};

struct GcReport {
  uint64_t chunks_scanned = 0, chunk_bytes_scanned = 0;
  uint64_t live_temps = 0, live_temp_bytes = 0;
  uint64_t chunks_evicted = 0, bytes_evicted = 0;
  uint64_t temps_removed = 0, temp_bytes_removed = 0;
  uint64_t skipped_in_use = 0;  // eviction candidates used or rewritten during the scan
  uint64_t corrupt_removed = 0; // chunk-named files whose header, size or type is wrong
  uint64_t unverified = 0;      // chunk files of a newer format or unreadable: not counted, not evicted
  uint64_t remove_failed = 0;   // removals the filesystem refused (kvtier gc then exits non-zero)
  WalkCounts skipped;           // links, special files and foreign names left alone
  uint64_t bytes_after = 0;     // chunks + live temporaries after this run (as measured by it)
  uint64_t chunks_after = 0;
};

// Runs one gc pass over the pool at `root`; calls `on_action` for each removal (or, with dry_run, each
// removal it would make). NotFound when there is no pool; VersionMismatch for a newer pool format;
// Busy when another gc holds the pool; IOError when the pool cannot be listed. Failures to unlink a
// single file are skipped, not fatal.
// With dry_run the pool is opened read-only: nothing is created, written or locked.
Result<GcReport> CollectPoolGarbage(const std::string& root, const GcOptions& options,
                                    const std::function<void(const GcAction&)>& on_action = nullptr);
// The same over a pool already open (the fs:// tier's own eviction passes).
Result<GcReport> CollectPoolGarbage(ChunkDir& pool, const GcOptions& options,
                                    const std::function<void(const GcAction&)>& on_action = nullptr);

std::string_view GcReasonName(GcReason reason);  // "evict", "stale-temp", "corrupt"

}  // namespace kvtier::internal
