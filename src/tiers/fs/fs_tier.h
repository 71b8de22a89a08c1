// fs:///path?options: a chunk pool in a directory on a shared filesystem (NFS, Lustre, CephFS, 3FS,
// an NVMe-oF volume), used at once by many engine processes on many hosts.
//
// Nothing is trusted from memory for long: presence is a stat() of the chunk's path, remembered
// briefly: a miss for neg_ttl_ms (a Put by this process clears it), a hit (a stat, a Put or a read
// by this process) for pos_ttl_ms, so the scheduler's repeated Lookups of one prompt cost no
// syscall. A remembered hit may be stale (another host's gc removed the chunk): chunks are immutable
// and verified on load, so that costs one NotFound read, which the Store treats as a miss and which
// forgets the hit. ContainsMany stats a batch on the caller's thread while stats are fast (a local
// disk) and on several threads once they take a network round trip. (A Store's Load does not ask
// the last tier at all: the read's open says whether the chunk is there.)
// Every metadata round trip (stat, open, fstat, create, rename, unlink, ...) is counted in
// TierStats::metadata_ops.
// Writers publish with temporary file + link(2), so readers see no chunk or a whole one and a
// published name is never replaced: when two hosts write the same chunk at once, the first link wins
// and the other writer drops its copy (a name renamed over from two CephFS mounts would move its
// capabilities between the clients on every write). A filesystem without hard links gets rename.
// A chunk unlinked while being read is read whole (the reader holds it open) or reported NotFound.
// Reads go through io/chunk_io.h, the same bounded-bytes-in-flight path as file://.
//
// Options (all optional):
//   capacity=SIZE        bound this process keeps the pool under: a Put that would pass it first
//                        runs a gc pass (evicting least recently used chunks to 90%), and open
//                        measures the pool with one (evicting when it is over). Each process sees
//                        other hosts' chunks only at those passes, so the bound is per-process
//                        accurate; for a hard pool-wide bound run `kvtier gc` on a timer (see
//                        docs/shared-pool.md). Without capacity, open reads no directory tree and
//                        usage is the last gc's figure plus this process's own puts. A Put that
//                        needs a pass while `kvtier gc` holds the pool returns Busy (retryable).
//   neg_ttl_ms=1000      how long a miss is remembered (0 disables the negative cache)
//   pos_ttl_ms=1000      how long a hit is remembered (0 disables the positive cache)
//   neg_entries=65536    bound on remembered misses (and, separately, on remembered hits)
//   touch_s=60           a hit refreshes the chunk's mtime (gc's recency) at most this often per process
//   direct=auto          auto: read with O_DIRECT or buffered, whichever a probe at open finds faster
//                        and correct on this mount (fs/read_probe.h); on: O_DIRECT where accepted;
//                        off: buffered. Stats().read_mode says which and why. Puts follow the
//                        reads: O_DIRECT from the caller's pages where they lie on 4 KiB boundaries.
//   io_uring=true        read with io_uring when the kernel allows, else preadv threads; O_DIRECT writes
//                        also go through the writing thread's io_uring (io/async_writes.h)
//   inflight=256MiB      bound on bytes being read at once
//   sync=false           fsync each chunk before publishing it
//   create=true          create the pool when the directory has none
//   verify_threads=N     threads that verify (or decrypt) and copy out pieces of chunks as they land,
//                        while the reader keeps reading (0-64; default as file://: one per core, 1 to 8;
//                        0: the reading thread does it, and submits nothing meanwhile)
//   key_file=PATH        encrypted, authenticated chunks (docs/encryption.md)
//
// Read-only (TierOpenOptions::read_only, used by `kvtier inspect`, `stats`, `verify`): the pool must
// exist; no gc pass runs (whatever capacity= says), no read probe is written, nothing is created,
// written, touched or removed, and Put and Remove fail with NotSupported.
//
// Every file access goes through the pool's chunk directory (io/chunk_dir.h): no link is followed,
// only regular files are opened, only kvtier's names are removed.
//
// Open fails with VersionMismatch for a pool written by a newer format, NotFound for a missing pool
// when create=false or read-only, InvalidArgument for bad options or a directory of other files.
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>

#include "core/chunk_cipher.h"
#include "core/eviction_policy.h"
#include "tiers/fs/read_probe.h"
#include "io/chunk_io.h"
#include "io/filesystem.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

struct FsTierOptions {
  std::string root;
  uint64_t capacity_bytes = 0;  // 0: unbounded
  std::chrono::milliseconds neg_ttl{1000};
  std::chrono::milliseconds pos_ttl{1000};
  uint64_t neg_entries = 65536;
  std::chrono::seconds touch_interval{60};
  FsDirectMode direct = FsDirectMode::kAuto;
  bool io_uring = true;
  uint64_t inflight_bytes = 256ull << 20;
  bool sync = false;
  bool create = true;
  bool read_only = false;
  EvictionPolicy policy = EvictionPolicy::kLru;  // policy=: the order of its gc passes (pool_gc.h)
  bool repair = false;  // `kvtier verify --repair`: writable, but nothing evicted, at open or later
  unsigned verify_threads = DefaultVerifyThreads();  // threads verifying pieces as they land (0: the reader's)
  // optional: the filesystem under the pool (tests inject faults here; direct=auto then times no probe)
  std::shared_ptr<FileSystem> fs = nullptr;
  std::shared_ptr<const ChunkCipher> cipher = nullptr;  // key_file=: encrypted chunks only (docs/encryption.md)
  std::shared_ptr<HostAllocator> host_allocator = nullptr;  // TierOpenOptions': the reader's bounce slab
  // optional: the clock ContainsMany times its stats with to choose threads (tests give one they drive,
  // so the choice does not depend on how fast the test host is); unset: std::chrono::steady_clock
  std::function<std::chrono::steady_clock::time_point()> stat_clock = nullptr;
};

Result<FsTierOptions> ParseFsTierOptions(const TierUrl& url);

Result<std::unique_ptr<Tier>> OpenFsTier(const TierUrl& url, const TierOpenOptions& open = {});
Result<std::unique_ptr<Tier>> OpenFsTierWithOptions(const FsTierOptions& options, std::string url);

// Flips one payload byte of a stored chunk behind the tier's back (for corruption tests).
Status CorruptPoolChunkForTesting(const std::string& root, const ChunkId& id);
// The path of chunk `id` in the pool at `root` (tests).
std::string PoolChunkPathForTesting(const std::string& root, const ChunkId& id);

}  // namespace kvtier::internal
