#include "gpu/gpu_plan.h"

#include <algorithm>
#include <string>

namespace kvtier::internal {

Status ValidateCache(const Layout& layout, const PagedKvCache& cache) {
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  KVTIER_RETURN_IF_ERROR(RequireClassicLayout(layout, "the GPU path (vLLM's per-layer K and V tensors)"));
  if (cache.block_tokens < kMinBlockTokens || cache.block_tokens > kMaxBlockTokens) {
    return Status::InvalidArgument("paged KV cache: block_tokens " + std::to_string(cache.block_tokens) +
                                   " is outside [16, 256]");
  }
  if (cache.num_blocks == 0) return Status::InvalidArgument("paged KV cache: num_blocks is 0");
  if (cache.k.size() != layout.layers || cache.v.size() != layout.layers) {
    return Status::InvalidArgument("paged KV cache: " + std::to_string(cache.k.size()) + " K and " +
                                   std::to_string(cache.v.size()) + " V tensors for a layout of " +
                                   std::to_string(layout.layers) + " layers");
  }
  for (uint32_t l = 0; l < layout.layers; ++l) {
    if (cache.k[l] == nullptr || cache.v[l] == nullptr) {
      return Status::InvalidArgument("paged KV cache: layer " + std::to_string(l) + " has a NULL tensor");
    }
  }
  return Status::OK();
}

Status ValidateOpen(const Layout& layout, const PagedKvCache& cache, const GpuTransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(ValidateCache(layout, cache));
  if (options.layer_groups == 0 || options.layer_groups > layout.layers) {
    return Status::InvalidArgument("GpuTransferOptions: layer_groups " + std::to_string(options.layer_groups) +
                                   " is outside [1, " + std::to_string(layout.layers) + "]");
  }
  if (options.host_threads == 0 || options.host_threads > 64) {
    return Status::InvalidArgument("GpuTransferOptions: host_threads " + std::to_string(options.host_threads) +
                                   " is outside [1, 64]");
  }
  return Status::OK();
}

uint64_t BlocksNeeded(const Layout& layout, uint32_t block_tokens, uint64_t chunks) {
  const uint64_t tokens = chunks * layout.tokens_per_chunk;
  return (tokens + block_tokens - 1) / block_tokens;
}

Status CheckBlockTable(const Layout& layout, const PagedGeometry& cache, uint64_t chunks,
                       std::span<const uint32_t> block_table) {
  const uint64_t need = BlocksNeeded(layout, cache.block_tokens, chunks);
  if (block_table.size() < need) {
    return Status::InvalidArgument("block table has " + std::to_string(block_table.size()) +
                                   " blocks; " + std::to_string(chunks) + " chunks need " +
                                   std::to_string(need));
  }
  for (uint64_t i = 0; i < need; ++i) {
    if (block_table[i] >= cache.num_blocks) {
      return Status::InvalidArgument("block table entry " + std::to_string(i) + " names block " +
                                     std::to_string(block_table[i]) + " of a cache of " +
                                     std::to_string(cache.num_blocks));
    }
  }
  return Status::OK();
}

void PlanChunkRuns(const ChunkGeometry& geometry, const PagedGeometry& cache,
                   std::span<const uint32_t> block_table, uint64_t chunk, uint32_t layer_begin,
                   uint32_t layer_end, std::vector<CopyRun>& out) {
  const uint64_t first_token = chunk * geometry.tokens;  // of the request
  for (uint32_t layer = layer_begin; layer < layer_end; ++layer) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      uint32_t t = 0;  // token inside the chunk
      while (t < geometry.tokens) {
        const uint64_t request_token = first_token + t;
        const uint32_t row = static_cast<uint32_t>(request_token % cache.block_tokens);
        const uint32_t n = std::min(geometry.tokens - t, cache.block_tokens - row);
        out.push_back({geometry.RowOffset(layer, kv, t), layer, kv,
                       block_table[request_token / cache.block_tokens], row, n});
        t += n;
      }
    }
  }
}

void ToDeviceRuns(std::span<const CopyRun> runs, const ChunkGeometry& geometry, const PagedGeometry& cache,
                  uint64_t staging, std::span<const uint64_t> k, std::span<const uint64_t> v,
                  RunDirection direction, std::vector<DeviceRun>& out) {
  for (const CopyRun& r : runs) {
    const uint64_t tensor = r.kv == 0 ? k[r.layer] : v[r.layer];
    const uint64_t block_addr = tensor + BlockRowOffset(geometry, cache, r.block, r.row);
    const uint64_t chunk_addr = staging + r.chunk_offset;
    const uint64_t bytes = uint64_t{r.tokens} * geometry.row_bytes;
    if (direction == RunDirection::kToBlocks) {
      out.push_back({chunk_addr, block_addr, bytes});
    } else {
      out.push_back({block_addr, chunk_addr, bytes});
    }
  }
}

LayerRange LayerGroup(uint32_t layers, uint32_t groups, uint32_t group) {
  return {static_cast<uint32_t>(uint64_t{group} * layers / groups),
          static_cast<uint32_t>(uint64_t{group + 1} * layers / groups)};
}

}  // namespace kvtier::internal
