// ChunkGeometry: where the rows of one layer, K or V, and token lie in a chunk's bytes.
//
// A chunk of a Layout is 2 x layers pieces in the order layer 0 K, layer 0 V, layer 1 K, ...; a piece
// is tokens_per_chunk rows and a row is one token's kv_heads x head_dim values of the dtype. The
// reference engine's paged pool (src/eval/engine/kv_pool) and the GPU path (src/gpu) both map chunk bytes
// to their blocks through this one definition. A plain value; thread-safe.
#pragma once

#include <cstdint>

#include "kvtier/layout.h"

namespace kvtier::internal {

struct ChunkGeometry {
  explicit ChunkGeometry(const Layout& layout)
      : layers(layout.layers),
        tokens(layout.tokens_per_chunk),
        row_bytes(uint64_t{layout.kv_heads} * layout.head_dim * DTypeBytes(layout.dtype)),
        piece_bytes(row_bytes * layout.tokens_per_chunk) {}

  uint32_t pieces() const { return layers * 2; }
  // kv: 0 for K, 1 for V.
  static uint32_t PieceIndex(uint32_t layer, uint32_t kv) { return layer * 2 + kv; }
  uint64_t PieceOffset(uint32_t layer, uint32_t kv) const { return PieceIndex(layer, kv) * piece_bytes; }
  uint64_t RowOffset(uint32_t layer, uint32_t kv, uint32_t token) const {
    return PieceOffset(layer, kv) + token * row_bytes;
  }
  // Layers [begin, end) are one contiguous byte range of the chunk.
  uint64_t LayersOffset(uint32_t begin) const { return uint64_t{begin} * 2 * piece_bytes; }
  uint64_t LayersBytes(uint32_t begin, uint32_t end) const { return uint64_t{end - begin} * 2 * piece_bytes; }

  uint32_t layers;
  uint32_t tokens;       // tokens per chunk
  uint64_t row_bytes;    // one token of one layer's K (or V)
  uint64_t piece_bytes;  // one layer's K (or V) for every token of the chunk
};

}  // namespace kvtier::internal
