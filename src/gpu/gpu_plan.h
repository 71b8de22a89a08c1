// Planning of the GPU path (pure C++, no CUDA): which bytes of which chunk go to which row of which
// block. A chunk's rows for one (layer, K or V) are contiguous, and so are a block's, so the move of
// one chunk into a paged cache is a list of runs: (layer, K/V, first token) of the chunk -> (block,
// first row) for as many tokens as stay inside one block. The scatter kernel (load) and the gather
// kernel (save) execute the same runs in opposite directions; tests execute them with memcpy.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/chunk_geometry.h"
#include "gpu/device_run.h"
#include "kvtier/gpu.h"
#include "kvtier/status.h"

namespace kvtier::internal {

inline constexpr uint32_t kMinBlockTokens = 16;
inline constexpr uint32_t kMaxBlockTokens = 256;

// One contiguous move between a chunk and a block.
struct CopyRun {
  uint64_t chunk_offset = 0;  // byte offset inside the chunk
  uint32_t layer = 0;
  uint32_t kv = 0;            // 0 K, 1 V
  uint32_t block = 0;         // block id in the cache
  uint32_t row = 0;           // first row inside the block
  uint32_t tokens = 0;        // rows moved
};

// The cache's geometry without its pointers.
struct PagedGeometry {
  uint32_t num_blocks = 0;
  uint32_t block_tokens = 0;
};

// InvalidArgument unless block_tokens is within [16, 256], num_blocks > 0 and the cache holds one K
// and one V pointer (non-null) per layer of `layout`.
Status ValidateCache(const Layout& layout, const PagedKvCache& cache);

// ValidateCache, options.layer_groups within [1, layers] and host_threads within [1, 64]: what GpuTransfer::Open checks before it
// looks for a device (with or without CUDA).
Status ValidateOpen(const Layout& layout, const PagedKvCache& cache, const GpuTransferOptions& options);

// Blocks a request of `chunks` chunks needs: ceil(chunks x tokens_per_chunk / block_tokens).
uint64_t BlocksNeeded(const Layout& layout, uint32_t block_tokens, uint64_t chunks);

// InvalidArgument when `block_table` has fewer than BlocksNeeded entries or one of those names a block
// >= num_blocks.
Status CheckBlockTable(const Layout& layout, const PagedGeometry& cache, uint64_t chunks,
                       std::span<const uint32_t> block_table);

// Appends the runs of chunk `chunk` (0-based in the request) for layers [layer_begin, layer_end), in
// chunk byte order. REQUIRES: CheckBlockTable passed for at least chunk + 1 chunks.
void PlanChunkRuns(const ChunkGeometry& geometry, const PagedGeometry& cache,
                   std::span<const uint32_t> block_table, uint64_t chunk, uint32_t layer_begin,
                   uint32_t layer_end, std::vector<CopyRun>& out);

// Byte offset of (block, row) inside one layer's K (or V) tensor.
inline uint64_t BlockRowOffset(const ChunkGeometry& geometry, const PagedGeometry& cache, uint32_t block,
                               uint32_t row) {
  return (uint64_t{block} * cache.block_tokens + row) * geometry.row_bytes;
}

// Direction of a DeviceRun list (a DeviceRun holds absolute addresses: device ones, or host ones in
// tests).
enum class RunDirection : uint8_t { kToBlocks, kFromBlocks };

// Turns the runs of a chunk staged at `staging` (the chunk's first byte) into DeviceRuns between it and
// the tensors `k[layer]` / `v[layer]` (addresses as integers).
void ToDeviceRuns(std::span<const CopyRun> runs, const ChunkGeometry& geometry, const PagedGeometry& cache,
                  uint64_t staging, std::span<const uint64_t> k, std::span<const uint64_t> v,
                  RunDirection direction, std::vector<DeviceRun>& out);

// ---- caller-described places (DevicePieces, include/kvtier/gpu.h) ----

// ValidateOpen without a cache: the layout and options.layer_groups / host_threads (GpuTransfer::OpenPieces).
Status ValidateOptions(const Layout& layout, const GpuTransferOptions& options);

// InvalidArgument unless `places` describes `chunks` chunks of `chunk_bytes` each as gpu.h says: one count
// per chunk, the pieces the counts add up to, no empty piece or null address, each chunk's sizes adding
// up to chunk_bytes, groups empty or one per piece, each < `groups` and non-decreasing within a chunk.
// On success, `starts` gets chunks + 1 entries: the first piece of each chunk, then the end.
Status ValidatePieces(const DevicePieces& places, size_t chunks, uint64_t chunk_bytes, uint32_t groups,
                      std::vector<size_t>& starts);

// Most pieces any chunk of `places` has. REQUIRES: ValidatePieces passed (starts from it).
size_t MaxPiecesPerChunk(std::span<const size_t> starts);

// Appends the DeviceRuns between the chunk staged at `staging` (its first byte) and the pieces of one
// chunk that belong to layer group `group` (`groups` empty: every piece is group 0), one run per piece at
// its offset in the chunk, in chunk order; returns the byte range of the chunk those pieces cover ({0, 0}
// when none). REQUIRES: the pieces and groups of one chunk that passed ValidatePieces.
ByteRange PieceRuns(std::span<const DevicePiece> pieces, std::span<const uint32_t> groups, uint32_t group,
                    uint64_t staging, RunDirection direction, std::vector<DeviceRun>& out);

// Layer group `group` of `groups` over `layers`: [first, last) with last - first >= 1.
// REQUIRES: 1 <= groups <= layers, group < groups.
struct LayerRange {
  uint32_t begin = 0;
  uint32_t end = 0;
};
LayerRange LayerGroup(uint32_t layers, uint32_t groups, uint32_t group);

}  // namespace kvtier::internal
