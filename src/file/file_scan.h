// Rebuilding a file:// tier's index from what is on disk at open. Removes leftovers of interrupted
// writes (temporary names whose writer process is gone, or older than an hour) and chunk files whose
// size no chunk can have; leaves files that are not ours, and live writers' temporaries, alone.
// Reads no chunk contents: a chunk is verified when it is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/tier.h"

namespace kvtier::internal {

struct ScannedChunk {
  ChunkId id;  // layout_fingerprint is 0: the header is not read
  uint64_t stored_bytes = 0;
  int64_t mtime_ns = 0;
};

struct ScanResult {
  std::vector<ScannedChunk> chunks;  // oldest modification first
  uint64_t temp_removed = 0;         // leftovers of interrupted writes
  uint64_t bad_size_removed = 0;     // chunk files too short or not padded as written
};

// Scans `dir` (which must exist). IOError when a directory cannot be read.
Result<ScanResult> ScanChunkDir(const std::string& dir);

}  // namespace kvtier::internal
