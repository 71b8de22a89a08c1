// Rebuilding a file:// tier's index from its chunk directory at open. Each chunk file's header is read
// and checked against its name and size (one 4 KiB read per chunk), so a file of the wrong size or type
// is known to be corrupt before its length counts against the capacity. Opened for writing, the scan
// removes what is kvtier's and broken: corrupt chunk files and temporaries of writers that are gone.
// Read-only, it removes nothing and only counts. Files kvtier did not make, links and special files
// are counted and never touched.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "io/chunk_dir.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

// Temporaries untouched for this long are leftovers even when their writer's pid looks alive (it may
// have been reused).
inline constexpr std::chrono::seconds kFileTempGrace{3600};

struct ScannedChunk {
  ChunkId id;  // with the layout fingerprint from the header
  uint64_t stored_bytes = 0;
  int64_t mtime_ns = 0;
};

struct ScanResult {
  std::vector<ScannedChunk> chunks;  // oldest modification first
  uint64_t temp_removed = 0;         // leftovers of interrupted writes (removed unless read-only)
  uint64_t corrupt_found = 0;        // chunk files whose header, size or type is wrong
  uint64_t corrupt_removed = 0;
  uint64_t newer_skipped = 0;        // chunks of a newer format: left alone
  uint64_t unreadable = 0;           // chunk files that could not be read now
  WalkCounts skipped;                // links, special files, foreign names
};

Result<ScanResult> ScanChunkDir(ChunkDir& dir);

}  // namespace kvtier::internal
