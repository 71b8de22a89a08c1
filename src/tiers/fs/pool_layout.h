// The on-disk layout of a shared pool (fs://): one directory that many processes on many hosts use at
// once. Nothing here is cached in memory; every answer comes from the filesystem, through the pool's
// chunk directory (io/chunk_dir.h), which never follows a link and opens only regular files.
//
//   <root>/KVTIER_POOL                          pool marker: format version (written once, atomically)
//   <root>/USAGE                                bytes and chunks counted by the last `kvtier gc` scan
//   <root>/GC.lock                              held (flock) by a running gc
//   <root>/READPROBE.kvtmp.<writer>.<pid>...    a read probe being timed at a writable open (fs/read_probe.h)
//   <root>/v1/<ns hex>/<k[0:2]>/<k[2:4]>/<key hex>.kvc      one chunk (core/chunk_format.h)
//   ... same directory: <key hex>.kvc.kvtmp.<writer>.<pid>...  a chunk being written (io/dir_names.h)
//
// Two levels of 256-way fan-out below each namespace keep directories small: 10 million chunks of
// one model give ~150 entries per leaf directory.
//
// All functions are thread-safe. Failures are Status values; none throws.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "io/chunk_dir.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// The pool format this build writes and the newest it can read.
inline constexpr uint32_t kPoolFormatVersion = 1;
inline constexpr std::string_view kPoolMetaName = "KVTIER_POOL";
inline constexpr std::string_view kPoolUsageName = "USAGE";
inline constexpr std::string_view kPoolGcLockName = "GC.lock";

// The chunk-directory layout of a pool.
ChunkDirSpec PoolDirSpec();

// Opens the pool at `root`: creates and marks it when `create` (and not read-only) and it has no
// marker yet. NotFound when it does not exist and may not be created; VersionMismatch for a pool of a
// newer format; InvalidArgument for a directory of other files; IOError when the filesystem refuses.
Result<std::unique_ptr<ChunkDir>> OpenPool(const std::string& root, const ChunkDirOptions& options);

// The pool size a gc scan measured, recorded so every tier instance can report usage cheaply.
struct PoolUsage {
  uint64_t bytes = 0;
  uint64_t chunks = 0;
  int64_t scanned_at = 0;  // unix seconds
};
// The text of USAGE, and its parser: Corruption when malformed or out of range.
std::string EncodePoolUsage(const PoolUsage& usage);
Result<PoolUsage> ParsePoolUsage(std::string_view text);
// Writes USAGE atomically (temporary + rename).
Status WritePoolUsage(ChunkDir& pool, const PoolUsage& usage);
// NotFound when no gc has run yet; Corruption when the file is malformed.
Result<PoolUsage> ReadPoolUsage(ChunkDir& pool);

}  // namespace kvtier::internal
