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
  return ValidateOptions(layout, options);
}

Status ValidateOptions(const Layout& layout, const GpuTransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(layout.Validate());
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

namespace {

Status BadPieces(const std::string& what) { return Status::InvalidArgument("GPU pieces: " + what); }

// One chunk's pieces [begin, end): sizes, addresses and groups.
Status CheckChunkPieces(const DevicePieces& p, size_t chunk, size_t begin, size_t end, uint64_t chunk_bytes,
                        uint32_t groups) {
  const std::string of = " of chunk " + std::to_string(chunk);
  uint64_t sum = 0;
  for (size_t i = begin; i < end; ++i) {
    const DevicePiece& piece = p.pieces[i];
    const std::string which = "piece " + std::to_string(i - begin) + of;
    if (piece.bytes == 0) return BadPieces(which + " has 0 bytes");
    if (piece.address == nullptr) return BadPieces(which + " has a null address");
    if (piece.bytes > chunk_bytes - sum) {
      return BadPieces("the pieces" + of + " add up to more than " + std::to_string(chunk_bytes) +
                       " bytes (the layout's chunk)");
    }
    sum += piece.bytes;
    if (p.groups.empty()) continue;
    if (p.groups[i] >= groups) {
      return BadPieces(which + " is in layer group " + std::to_string(p.groups[i]) + " of " +
                       std::to_string(groups));
    }
    if (i > begin && p.groups[i] < p.groups[i - 1]) {
      return BadPieces(which + " is in layer group " + std::to_string(p.groups[i]) + ", after group " +
                       std::to_string(p.groups[i - 1]) + " (groups must not decrease within a chunk)");
    }
  }
  if (sum != chunk_bytes) {
    return BadPieces("the pieces" + of + " add up to " + std::to_string(sum) + " bytes, not " +
                     std::to_string(chunk_bytes) + " (the layout's chunk)");
  }
  return Status::OK();
}

}  // namespace

Status ValidatePieces(const DevicePieces& places, size_t chunks, uint64_t chunk_bytes, uint32_t groups,
                      std::vector<size_t>& starts) {
  if (places.pieces_per_chunk.size() != chunks) {
    return BadPieces(std::to_string(places.pieces_per_chunk.size()) + " piece counts for " +
                     std::to_string(chunks) + " chunks");
  }
  starts.assign(1, 0);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t n = places.pieces_per_chunk[c];
    if (n > places.pieces.size() - starts.back()) {
      return BadPieces("the counts add up to more than the " + std::to_string(places.pieces.size()) +
                       " pieces given");
    }
    starts.push_back(starts.back() + n);
  }
  if (starts.back() != places.pieces.size()) {
    return BadPieces("the counts add up to " + std::to_string(starts.back()) + " pieces, " +
                     std::to_string(places.pieces.size()) + " given");
  }
  if (!places.groups.empty() && places.groups.size() != places.pieces.size()) {
    return BadPieces(std::to_string(places.groups.size()) + " layer groups for " +
                     std::to_string(places.pieces.size()) + " pieces");
  }
  for (size_t c = 0; c < chunks; ++c) {
    KVTIER_RETURN_IF_ERROR(CheckChunkPieces(places, c, starts[c], starts[c + 1], chunk_bytes, groups));
  }
  return Status::OK();
}

size_t MaxPiecesPerChunk(std::span<const size_t> starts) {
  size_t most = 0;
  for (size_t c = 0; c + 1 < starts.size(); ++c) most = std::max(most, starts[c + 1] - starts[c]);
  return most;
}

ByteRange PieceRuns(std::span<const DevicePiece> pieces, std::span<const uint32_t> groups, uint32_t group,
                    uint64_t staging, RunDirection direction, std::vector<DeviceRun>& out) {
  uint64_t offset = 0, lo = 0, hi = 0;
  for (size_t i = 0; i < pieces.size(); offset += pieces[i].bytes, ++i) {
    if ((groups.empty() ? 0 : groups[i]) != group) continue;
    if (hi == lo) lo = offset;
    hi = offset + pieces[i].bytes;
    const uint64_t chunk_addr = staging + offset, place = reinterpret_cast<uint64_t>(pieces[i].address);
    if (direction == RunDirection::kToBlocks) {
      out.push_back({chunk_addr, place, pieces[i].bytes});
    } else {
      out.push_back({place, chunk_addr, pieces[i].bytes});
    }
  }
  return {lo, hi - lo};
}

LayerRange LayerGroup(uint32_t layers, uint32_t groups, uint32_t group) {
  return {static_cast<uint32_t>(uint64_t{group} * layers / groups),
          static_cast<uint32_t>(uint64_t{group + 1} * layers / groups)};
}

}  // namespace kvtier::internal
