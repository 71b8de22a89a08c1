// A paged cache described the way the host path describes it (python/kvtier/connectors/vllm/host_paged.py,
// PagedCache): per region of a chunk, in chunk order, the address of its block 0 and the bytes from one
// block's region to the next's; the piece lists kvtier.gpu's LoadPieces / SavePieces take are built from
// it as PagedCache.pieces() builds them. Shared by gpu_plan_test (host memory) and gpu_device_test.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kvtier/gpu.h"

namespace kvtier::gpu_test {

struct Regions {
  std::vector<uint64_t> bases, strides;
  std::vector<uint32_t> layer;  // each region's layer
  uint64_t region_bytes = 0;    // block_tokens rows
};

// The two non-classic shapes of the tests, one tensor per layer at bases[l]: an MLA latent cache
// [num_blocks, block_tokens + pad, latent] (one region per layer, layer-major chunks), or vLLM's CPU
// backend's HND cache [2, num_blocks, heads, block_tokens, dim] (regions head by head, then layer, then
// K and V: the grouped kv layout's head-major chunk order).
struct CacheShape {
  bool head_major = false;
  uint32_t layers = 0, heads = 1, block_tokens = 16, num_blocks = 0, pad = 0;
  uint64_t row = 0;  // one token's latent, or one head's row, in bytes
  uint64_t block() const { return head_major ? uint64_t{heads} * block_tokens * row : (block_tokens + pad) * row; }
  uint64_t tensor() const { return (head_major ? 2 : 1) * uint64_t{num_blocks} * block(); }
};

inline Regions MakeRegions(const CacheShape& s, std::span<const uint64_t> bases) {
  Regions r;
  r.region_bytes = s.block_tokens * s.row;
  for (uint32_t h = 0; h < (s.head_major ? s.heads : 1); ++h) {
    for (uint32_t l = 0; l < s.layers; ++l) {
      for (uint32_t kv = 0; kv < (s.head_major ? 2u : 1u); ++kv) {
        r.bases.push_back(bases[l] + kv * s.num_blocks * s.block() + uint64_t{h} * s.block_tokens * s.row);
        r.strides.push_back(s.block());
        r.layer.push_back(l);
      }
    }
  }
  return r;
}

// One chunk's pieces over `blocks` (its blocks in request order): region by region, block by block;
// with `merge`, a region that follows the previous piece in memory extends it. `layers` gets each
// piece's first region's layer.
inline std::vector<DevicePiece> ChunkPieces(const Regions& r, std::span<const uint32_t> blocks, bool merge,
                                            std::vector<uint32_t>* layers = nullptr) {
  std::vector<DevicePiece> out;
  for (size_t i = 0; i < r.bases.size(); ++i) {
    for (uint32_t b : blocks) {
      const uint64_t addr = r.bases[i] + uint64_t{b} * r.strides[i];
      if (merge && !out.empty() && reinterpret_cast<uint64_t>(out.back().address) + out.back().bytes == addr) {
        out.back().bytes += r.region_bytes;
        continue;
      }
      out.push_back({reinterpret_cast<void*>(addr), r.region_bytes});
      if (layers != nullptr) layers->push_back(r.layer[i]);
    }
  }
  return out;
}

// Reference, token by token: region r of a chunk is its bytes [r, r + 1) x tokens x row; token t of the
// request lives in block table[t / block_tokens], row t % block_tokens. Copies chunk `ch` (at `chunk`)
// into the host memory the regions point at (`to_blocks`) or back out of it.
inline void ReferenceCopy(const Regions& r, std::span<const uint32_t> table, uint32_t ch, uint32_t tokens,
                          uint32_t block_tokens, uint64_t row, std::byte* chunk, bool to_blocks) {
  for (size_t i = 0; i < r.bases.size(); ++i) {
    for (uint32_t t = 0; t < tokens; ++t) {
      const uint64_t req = uint64_t{ch} * tokens + t;
      auto* place = reinterpret_cast<std::byte*>(r.bases[i] + table[req / block_tokens] * r.strides[i] +
                                                 (req % block_tokens) * row);
      std::byte* bytes = chunk + (i * tokens + t) * row;
      if (to_blocks) {
        std::memcpy(place, bytes, row);
      } else {
        std::memcpy(bytes, place, row);
      }
    }
  }
}

}  // namespace kvtier::gpu_test
