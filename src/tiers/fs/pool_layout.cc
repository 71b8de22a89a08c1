#include "tiers/fs/pool_layout.h"

#include "tiers/fs/read_probe.h"


namespace kvtier::internal {
namespace {

// Bounds on what a USAGE file may say: anything beyond is someone else's writing, not a gc's.
constexpr uint64_t kMaxPoolBytes = 1ull << 60;       // 1 EiB
constexpr uint64_t kMaxPoolChunks = 1ull << 40;
constexpr uint64_t kMaxUnixSeconds = 1ull << 40;

}  // namespace

ChunkDirSpec PoolDirSpec() {
  ChunkDirSpec spec;
  spec.kind = "kvtier-pool";
  spec.marker = std::string(kPoolMetaName);
  spec.version = kPoolFormatVersion;
  spec.chunk_root = "v1";
  spec.fanout_levels = 2;
  spec.own_files = {std::string(kPoolUsageName), std::string(kPoolGcLockName), std::string(kReadProbeName)};
  return spec;
}

Result<std::unique_ptr<ChunkDir>> OpenPool(const std::string& root, const ChunkDirOptions& options) {
  return ChunkDir::Open(root, PoolDirSpec(), options);
}

std::string EncodePoolUsage(const PoolUsage& u) {
  return "bytes=" + std::to_string(u.bytes) + "\nchunks=" + std::to_string(u.chunks) +
         "\nscanned_at=" + std::to_string(u.scanned_at) + "\n";
}

Result<PoolUsage> ParsePoolUsage(std::string_view text) {
  PoolUsage u;
  uint64_t at = 0;
  if (!ParseBoundedU64(FindKeyValue(text, "bytes"), kMaxPoolBytes, &u.bytes) ||
      !ParseBoundedU64(FindKeyValue(text, "chunks"), kMaxPoolChunks, &u.chunks) ||
      !ParseBoundedU64(FindKeyValue(text, "scanned_at"), kMaxUnixSeconds, &at)) {
    return Status::Corruption("malformed or out-of-range " + std::string(kPoolUsageName));
  }
  u.scanned_at = static_cast<int64_t>(at);
  return u;
}

Status WritePoolUsage(ChunkDir& pool, const PoolUsage& u) {
  return pool.WriteSmallFile(kPoolUsageName, EncodePoolUsage(u));
}

Result<PoolUsage> ReadPoolUsage(ChunkDir& pool) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, pool.ReadSmallFile(kPoolUsageName, 4096));
  return ParsePoolUsage(text);
}

}  // namespace kvtier::internal
