// KvPool: the engine's paged KV memory, a fixed number of bytes standing in for accelerator memory.
//
// The pool is cut into blocks of one store chunk each, and a block is exactly that chunk's bytes in the
// layout's chunk order, so Pieces(b) is a Store ScatterList/GatherList and a load writes straight into
// the pool with no staging copy:
//   * classic layout (tokens_per_chunk tokens x every layer x K and V, in a 16-bit dtype): as in
//     paged-attention engines each layer has its own K and its own V region, indexed by block, so one
//     block is 2 x layers pieces listed in chunk order (layer 0 K, layer 0 V, layer 1 K, ...); a token's
//     row there is kv_heads x head_dim values.
//   * grouped layout (docs/models.md): a block is one region per tensor-parallel rank, rank r's part
//     being the chunk of layout.SliceHeads(r H / ranks, (r + 1) H / ranks) (its KV heads, head-major,
//     then the latent and state groups whole); Pieces(b) is Layout::AssembleFromRanks of the parts, so a
//     save gathers every rank's heads into one chunk and a load scatters each rank's heads straight into
//     its part (latent and state land in rank 0's part; Replicate copies them to the others). A head's
//     K rows of one layer are tokens_per_chunk consecutive rows of head_dim values.
// The pool's memory is 2 MiB aligned, so classic pieces of a 4 KiB multiple are 4 KiB aligned and a
// file:// load lands in them directly.
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

// The rows of one KV head (or of a latent) of one layer in one block: row `slot` at data + slot * stride.
struct PoolRows {
  uint16_t* data = nullptr;
  size_t stride = 0;  // values
  uint16_t* Row(uint32_t slot) const { return data + size_t{slot} * stride; }
};

class KvPool {
 public:
  // InvalidArgument for an invalid layout, per-token groups whose dtype is not 16-bit, a state that is
  // not fp32, or `ranks` > 1 with a classic layout or one whose KV heads the ranks do not divide;
  // NoSpace when `pool_bytes` holds no block.
  static Result<std::unique_ptr<KvPool>> Create(const Layout& layout, uint64_t pool_bytes, uint32_t ranks = 1);

  const Layout& layout() const { return layout_; }
  uint32_t block_count() const { return blocks_; }
  uint64_t block_bytes() const { return layout_.BytesPerChunk(); }  // one chunk (its parts hold more)
  uint32_t ranks() const { return ranks_; }
  uint32_t free_blocks() const EXCLUDES(mu_);

  // Takes `n` free blocks; NoSpace (nothing taken) when fewer are free.
  Result<std::vector<uint32_t>> Allocate(uint32_t n) EXCLUDES(mu_);
  void Free(std::span<const uint32_t> blocks) EXCLUDES(mu_);

  // K (or V) rows of KV head `head` (model-wide; in the part of the rank that owns it) at `layer` (a kv
  // or window layer) in `block`: head_dim values per row.
  PoolRows K(uint32_t layer, uint32_t head, uint32_t block) { return Rows(layer, head, block, false); }
  PoolRows V(uint32_t layer, uint32_t head, uint32_t block) { return Rows(layer, head, block, true); }
  // Grouped layouts: the latent rows of a latent layer, and the fp32 state of a state layer, in rank
  // `rank`'s copy.
  PoolRows Latent(uint32_t layer, uint32_t block, uint32_t rank);
  float* State(uint32_t layer, uint32_t block, uint32_t rank);

  // `block` as one chunk in chunk order: the classic form's 2 x layers pieces, or the grouped form's
  // gather of the ranks' parts.
  std::vector<std::span<std::byte>> Pieces(uint32_t block);
  std::vector<std::span<const std::byte>> ConstPieces(uint32_t block);
  // After a load into Pieces(block): copies rank 0's latent and state groups into the other ranks'
  // parts (every rank keeps its own copy, as on real ranks). Nothing to do with one rank.
  void Replicate(uint32_t block);

 private:
  // Where one layer lies in a rank's part of a block (grouped form), in bytes.
  struct Place {
    uint64_t offset = 0;       // head 0's K rows; the latent rows; the state
    uint64_t head_stride = 0;  // head-split layers: from one head's rows to the next head's
    uint64_t v_offset = 0;     // head-split layers: from a head's K rows to its V rows
    uint32_t width = 0;        // values per row (head_dim or the latent's)
  };

  KvPool(const Layout& layout, uint32_t ranks);
  Status PlanGrouped();
  PoolRows Rows(uint32_t layer, uint32_t head, uint32_t block, bool v);
  std::byte* Part(uint32_t block, uint32_t rank) {
    return data_.data() + (size_t{block} * ranks_ + rank) * part_bytes_;
  }
  uint16_t* Piece(uint32_t layer, uint32_t kv, uint32_t block) {
    return reinterpret_cast<uint16_t*>(data_.data()) + ((size_t{layer} * 2 + kv) * blocks_ + block) * piece_;
  }

  const Layout layout_;
  uint32_t blocks_ = 0;  // set by Create
  const uint32_t ranks_;
  const size_t row_;    // classic: values per token row
  const size_t piece_;  // classic: values per (layer, K or V, block)
  uint32_t heads_per_rank_ = 0;     // grouped
  uint64_t part_bytes_ = 0;         // grouped: one rank's part of a block
  std::vector<Place> places_;       // grouped: per layer
  std::vector<ByteRange> shared_;   // grouped: the latent and state groups in a part
  // 2 MiB aligned (4 KiB at least): a piece whose size is a multiple of 4 KiB then starts on a 4 KiB
  // boundary, so file:// reads it in place with O_DIRECT (no bounce buffer, no copy).
  AlignedBuffer data_;
  mutable Mutex mu_;
  std::vector<uint32_t> free_ GUARDED_BY(mu_);
};

}  // namespace kvtier::internal
