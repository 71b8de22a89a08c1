// KvPool: the engine's paged KV memory, a fixed number of bytes standing in for accelerator memory.
//
// The pool is cut into blocks of one store chunk each (tokens_per_chunk tokens x every layer x K and V,
// in the layout's 16-bit dtype). As in paged-attention engines, each layer has its own K and its own V
// region, indexed by block, so one block is 2 x layers separate pieces: Pieces(b) lists them in chunk
// order (layer 0 K, layer 0 V, layer 1 K, ...), which is exactly a Store ScatterList/GatherList, so a
// load writes straight into the pool with no staging copy.
//
// Inside a piece, a token's row is kv_heads x head_dim values. The pool's memory is 2 MiB aligned, so
// pieces of a 4 KiB multiple are 4 KiB aligned and a file:// load lands in them directly.
// Thread-safety: Allocate/Free/free_blocks lock; row and piece accessors are lock-free and the caller
// must own the block (a block belongs to one sequence between Allocate and Free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_annotations.h"
#include "io/chunk_io.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

class KvPool {
 public:
  // InvalidArgument for an invalid layout or a dtype that is not 16-bit; NoSpace when `pool_bytes`
  // holds no block.
  static Result<std::unique_ptr<KvPool>> Create(const Layout& layout, uint64_t pool_bytes);

  const Layout& layout() const { return layout_; }
  uint32_t block_count() const { return blocks_; }
  uint64_t block_bytes() const { return layout_.BytesPerChunk(); }
  uint32_t free_blocks() const EXCLUDES(mu_);

  // Takes `n` free blocks; NoSpace (nothing taken) when fewer are free.
  Result<std::vector<uint32_t>> Allocate(uint32_t n) EXCLUDES(mu_);
  void Free(std::span<const uint32_t> blocks) EXCLUDES(mu_);

  // Row of K (or V) of `slot` (0..tokens_per_chunk-1) in `block` at `layer`: kv_heads*head_dim values.
  uint16_t* KRow(uint32_t layer, uint32_t block, uint32_t slot) { return Piece(layer, 0, block) + slot * row_; }
  uint16_t* VRow(uint32_t layer, uint32_t block, uint32_t slot) { return Piece(layer, 1, block) + slot * row_; }

  // The 2 x layers pieces of `block` in chunk order.
  std::vector<std::span<std::byte>> Pieces(uint32_t block);
  std::vector<std::span<const std::byte>> ConstPieces(uint32_t block);

 private:
  KvPool(const Layout& layout, uint32_t blocks);
  uint16_t* Piece(uint32_t layer, uint32_t kv, uint32_t block) {
    return reinterpret_cast<uint16_t*>(data_.data()) + ((size_t{layer} * 2 + kv) * blocks_ + block) * piece_;
  }

  const Layout layout_;
  const uint32_t blocks_;
  const size_t row_;    // values per token row
  const size_t piece_;  // values per (layer, K or V, block)
  // 2 MiB aligned (4 KiB at least): a piece whose size is a multiple of 4 KiB then starts on a 4 KiB
  // boundary, so file:// reads it in place with O_DIRECT (no bounce buffer, no copy).
  AlignedBuffer data_;
  mutable Mutex mu_;
  std::vector<uint32_t> free_ GUARDED_BY(mu_);
};

}  // namespace kvtier::internal
