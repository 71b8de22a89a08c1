// The on-disk layout of a shared pool (fs://): one directory that many processes on many hosts use at
// once. Nothing here is cached in memory; every answer comes from the filesystem.
//
//   <root>/KVTIER_POOL                          pool metadata: format version (written once, atomically)
//   <root>/USAGE                                bytes and chunks counted by the last `kvtier gc` scan
//   <root>/GC.lock                              held (flock) by a running gc
//   <root>/v1/<ns hex>/<k[0:2]>/<k[2:4]>/<key hex>.kvc      one chunk (core/chunk_format.h)
//   ... same directory .../<key hex>.kvc.tmp.<pid>...       a chunk being written (io/chunk_io.h)
//
// Two levels of 256-way fan-out below each namespace keep directories small: 10 million chunks of
// one model give ~150 entries per leaf directory.
//
// All functions are thread-safe. Failures are Status values; none throws.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

// The pool format this build writes and the newest it can read.
inline constexpr uint32_t kPoolFormatVersion = 1;
inline constexpr std::string_view kPoolMetaName = "KVTIER_POOL";
inline constexpr std::string_view kPoolUsageName = "USAGE";
inline constexpr std::string_view kPoolGcLockName = "GC.lock";
inline constexpr std::string_view kPoolChunkDirName = "v1";
inline constexpr std::string_view kChunkFileSuffix = ".kvc";

class PoolLayout {
 public:
  explicit PoolLayout(std::string root);

  const std::string& root() const { return root_; }
  std::string MetaPath() const { return root_ + "/" + std::string(kPoolMetaName); }
  std::string UsagePath() const { return root_ + "/" + std::string(kPoolUsageName); }
  std::string GcLockPath() const { return root_ + "/" + std::string(kPoolGcLockName); }
  std::string ChunkDir() const { return root_ + "/" + std::string(kPoolChunkDirName); }
  // <root>/v1/<ns hex>/<k[0:2]>/<k[2:4]>/<key hex>.kvc
  std::string ChunkPath(const ChunkId& id) const;

 private:
  std::string root_;  // without a trailing slash
};

// What a file name found in a leaf directory is.
enum class PoolEntryKind { kChunk, kTemp, kOther };
// kChunk: exactly "<64 hex>.kvc"; kTemp: contains ".tmp." (a writer's temporary, live or left behind);
// kOther: anything else, which kvtier never removes.
PoolEntryKind ClassifyPoolEntry(std::string_view file_name);

// The text of KVTIER_POOL for `version`.
std::string EncodePoolMeta(uint32_t version);
// The version recorded in a KVTIER_POOL text. Corruption when it is not a pool metadata file;
// VersionMismatch (naming both versions) when it was written by a newer, unknown format.
Result<uint32_t> ParsePoolMeta(std::string_view text, std::string_view root);

// Checks the pool at `root`, creating it (directory and metadata, atomically) when `create` is set
// and it has no metadata yet. NotFound when it does not exist and `create` is false; VersionMismatch
// for a pool of a newer format; IOError when the filesystem refuses.
Status OpenPool(const PoolLayout& layout, bool create);

// The pool size a gc scan measured, recorded so every tier instance can report usage cheaply.
struct PoolUsage {
  uint64_t bytes = 0;
  uint64_t chunks = 0;
  int64_t scanned_at = 0;  // unix seconds
};
// Writes USAGE atomically (temporary + rename).
Status WritePoolUsage(const PoolLayout& layout, const PoolUsage& usage);
// NotFound when no gc has run yet; Corruption when the file is malformed.
Result<PoolUsage> ReadPoolUsage(const PoolLayout& layout);

// Reads a small whole file (metadata); NotFound when absent.
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes = 64 * 1024);
// Writes `text` to a unique temporary beside `path` and renames it over `path`.
Status WriteSmallFileAtomic(const std::string& path, std::string_view text);

}  // namespace kvtier::internal
