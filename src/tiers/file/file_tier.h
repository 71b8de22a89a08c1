// file:///DIR?capacity=SIZE&sync=BOOL&direct=BOOL&inflight=SIZE: the local-NVMe tier.
//
// One file per chunk at DIR/<namespace hex>/<key hex[0:2]>/<key hex>.kvc in the format of
// core/chunk_format.h, published atomically (temporary name + rename). The index is rebuilt from the
// directory at open, so a restart keeps the cache; leftovers of interrupted writes are removed then.
// Usage (the sum of chunk file sizes) never exceeds capacity: least recently used chunks are evicted,
// also at open when a restart brings a smaller capacity. Hits refresh a file's mtime (at most once a
// second per chunk), so LRU order survives restarts. Reads go through io_uring with O_DIRECT where
// the kernel and filesystem allow, else a preadv thread pool; every chunk is verified before its bytes
// reach the caller, and one that fails is removed, counted and reported as Corruption. Chunks from
// aligned memory are written with O_DIRECT through the writing thread's io_uring (io/chunk_writer.cc),
// the header with the checksums (or tags) last.
//
// The directory is marked at creation (DIR/KVTIER_DIR); a non-empty directory without the mark is
// refused unless it holds only what earlier builds of file:// wrote. Every file access goes through the
// chunk directory (io/chunk_dir.h): no link is followed, only regular files are opened, and only
// kvtier's own names are removed.
//
// Options:
//   capacity  bytes on disk this process keeps the tier under (default 10GiB, kDefaultFileCapacity).
//             It binds the process that opens the tier for writing and is never written to disk; a
//             read-only open neither evicts nor enforces it.
//   sync      fsync each chunk and its directory before publishing (default false)
//   direct    read with O_DIRECT where accepted (default true)
//   inflight  bound on bytes read but not yet verified and copied out (default 256MiB)
//   verify_threads  threads that verify (or decrypt) and copy out pieces of chunks as they land, while
//             the reader keeps reading (0-64; default one per core, 1 to 8; 0: the
//             reading thread does it)
//   key_file  encrypted, authenticated chunks (docs/encryption.md)
// Unknown options are an InvalidArgument.
//
// Read-only (TierOpenOptions::read_only, used by `kvtier inspect`, `stats`, `verify`): the directory
// must exist; nothing is created, evicted, touched or removed; Put and Remove fail with NotSupported;
// a corrupt chunk is reported and left in place.
//
// Repair (FileTierOptions::repair, `kvtier verify --repair`): writable, but no capacity applies (not
// capacity=, not the default): nothing is evicted; Check removes what fails verification and returns
// IOError ("could not be removed") when the filesystem refuses the removal.
//
// One engine process per directory: two writers sharing one DIR would each enforce the capacity on
// their own view (use fs:// for a pool shared by several processes or hosts). Tools such as
// `kvtier verify` may open it beside the engine: open leaves the temporaries of live writers alone.
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <memory>
#include <string>

#include "io/chunk_dir.h"
#include "io/chunk_io.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

inline constexpr uint64_t kDefaultFileCapacity = 10ull << 30;
inline constexpr std::string_view kFileDirMarker = "KVTIER_DIR";

struct FileTierOptions {
  std::string dir;
  uint64_t capacity_bytes = 0;  // 0: kDefaultFileCapacity
  bool sync = false;
  bool read_only = false;
  // `kvtier verify --repair`: writable, but no capacity bound (neither capacity= nor the 10 GiB
  // default): nothing is evicted; Check removes only what fails verification.
  bool repair = false;
  ReaderOptions reader;  // direct_io is cleared at open when the filesystem refuses O_DIRECT
  std::shared_ptr<FileSystem> fs = nullptr;  // optional: the filesystem under DIR (tests inject faults here)
};

// The chunk-directory layout of file://: DIR/<ns>/<k[0:2]>/<key>.kvc, marker KVTIER_DIR.
ChunkDirSpec FileDirSpec();

// Opens (creating DIR if needed, unless read-only) and scans. InvalidArgument for bad options or a
// directory of other files; NotFound for a missing directory when read-only; IOError when DIR cannot
// be created or read.
Result<std::unique_ptr<Tier>> OpenFileTier(const TierUrl& url, const TierOpenOptions& open = {});
Result<std::unique_ptr<Tier>> OpenFileTier(const FileTierOptions& options);

// Parses the options of a file:// URL.
Result<FileTierOptions> ParseFileTierUrl(const TierUrl& url);

// What a file:// tier found at open and which read engine it uses (tests and `kvtier stats`).
struct FileTierReport {
  std::string io_engine;        // ChunkReader::engine()
  bool read_only = false;
  uint64_t temp_removed = 0;    // leftovers of interrupted writes removed at open
  uint64_t corrupt_found = 0;   // chunk files of the wrong header, size or type
  uint64_t corrupt_removed = 0; // of those, removed (never when read-only)
  uint64_t newer_skipped = 0;   // chunk files of a newer format, left alone
  uint64_t links_skipped = 0, special_skipped = 0, foreign_skipped = 0;
  uint64_t open_evictions = 0;  // chunks evicted at open to honour the capacity
};
// REQUIRES: `tier` was opened by OpenFileTier. Empty report otherwise.
FileTierReport GetFileTierReport(const Tier& tier);

// Tests only: flips the first payload byte of chunk `id` on disk under `dir`, behind the tier's back.
// NotFound when the chunk's file does not exist.
Status CorruptFileChunkForTesting(const std::string& dir, const ChunkId& id);
// Tests only: the path of chunk `id` under `dir`.
std::string FileChunkPathForTesting(const std::string& dir, const ChunkId& id);

}  // namespace kvtier::internal
