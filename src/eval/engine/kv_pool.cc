#include "eval/engine/kv_pool.h"

#include <cstring>
#include <new>
#include <string>

#include "core/chunk_geometry.h"

namespace kvtier::internal {

Result<std::unique_ptr<KvPool>> KvPool::Create(const Layout& layout, uint64_t pool_bytes, uint32_t ranks) {
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  if (layout.classic() && DTypeBytes(layout.dtype) != 2) {
    return Status::InvalidArgument("the KV pool keeps a 16-bit dtype, not " +
                                   std::string(DTypeName(layout.dtype)));
  }
  if (ranks == 0 || (ranks > 1 && layout.classic())) {
    return Status::InvalidArgument("a KV pool of " + std::to_string(ranks) + " tensor-parallel ranks needs a "
                                   "grouped layout (the classic form interleaves the heads)");
  }
  std::unique_ptr<KvPool> pool(new KvPool(layout, ranks));
  if (!layout.classic()) KVTIER_RETURN_IF_ERROR(pool->PlanGrouped());
  const uint64_t block_bytes = layout.classic() ? layout.BytesPerChunk() : pool->part_bytes_ * ranks;
  const uint64_t blocks = pool_bytes / block_bytes;
  if (blocks == 0) {
    return Status::NoSpace("a KV pool of " + FormatBytes(pool_bytes) + " holds no block of " +
                           FormatBytes(block_bytes));
  }
  if (blocks > UINT32_MAX) return Status::InvalidArgument("KV pool has too many blocks");
  pool->blocks_ = static_cast<uint32_t>(blocks);
  // Not value-initialised: pages are only touched when a block is first written.
  pool->data_ = AlignedBuffer::Allocate(blocks * block_bytes, size_t{2} << 20);
  if (pool->data_.data() == nullptr) return Status::NoSpace("cannot allocate a KV pool of " + FormatBytes(pool_bytes));
  {
    MutexLock lock(pool->mu_);
    pool->free_.reserve(blocks);
    for (uint32_t b = pool->blocks_; b > 0; --b) pool->free_.push_back(b - 1);  // hand out low blocks first
  }
  return pool;
}

KvPool::KvPool(const Layout& layout, uint32_t ranks)
    : layout_(layout),
      ranks_(ranks),
      row_(size_t{layout.kv_heads} * layout.head_dim),
      piece_(row_ * layout.tokens_per_chunk) {}

// A rank's part is the chunk of the layout's SliceHeads: its groups in order, head-split ones head-major
// (docs/models.md, "Chunk piece order").
Status KvPool::PlanGrouped() {
  const uint32_t heads = layout_.HeadSplitHeads();
  if (heads % ranks_ != 0) {
    return Status::InvalidArgument(std::to_string(ranks_) + " tensor-parallel ranks do not divide the " +
                                   std::to_string(heads) + " KV heads of " + layout_.ToString());
  }
  heads_per_rank_ = heads / ranks_;
  KVTIER_ASSIGN_OR_RETURN(Layout part, layout_.SliceHeads(0, heads_per_rank_));
  const uint64_t tokens = layout_.tokens_per_chunk;
  places_.assign(layout_.layers, Place{});
  uint64_t at = 0;
  for (const LayerGroup& g : part.groups) {
    const bool state = g.kind == GroupKind::kState;
    if (DTypeBytes(g.dtype) != (state ? 4u : 2u) || (state && (g.state_bytes % 4 != 0 || at % 4 != 0))) {
      return Status::InvalidArgument("the KV pool keeps per-token groups in a 16-bit dtype and states in fp32 (" +
                                     layout_.ToString() + ")");
    }
    const uint64_t start = at;
    for (size_t i = 0; i < g.layers.size(); ++i) {
      Place& p = places_[g.layers[i]];
      if (g.head_split()) {
        p.offset = at + i * tokens * (g.k_head_dim + g.v_head_dim) * 2;
        p.head_stride = g.layers.size() * tokens * (g.k_head_dim + g.v_head_dim) * 2;
        p.v_offset = tokens * g.k_head_dim * 2;
        p.width = g.k_head_dim;
      } else {
        p.offset = at + i * (state ? g.state_bytes : tokens * g.latent_dim * 2);
        p.width = g.latent_dim;
      }
    }
    at += g.head_split() ? places_[g.layers[0]].head_stride * g.kv_heads
                         : g.layers.size() * (state ? g.state_bytes : tokens * g.latent_dim * 2);
    if (!g.head_split()) shared_.push_back({start, at - start});
  }
  part_bytes_ = at;  // == part.BytesPerChunk()
  return Status::OK();
}

PoolRows KvPool::Rows(uint32_t layer, uint32_t head, uint32_t block, bool v) {
  if (layout_.classic()) return {Piece(layer, v ? 1 : 0, block) + size_t{head} * layout_.head_dim, row_};
  const Place& p = places_[layer];
  std::byte* at = Part(block, head / heads_per_rank_) + p.offset + (head % heads_per_rank_) * p.head_stride +
                  (v ? p.v_offset : 0);
  return {reinterpret_cast<uint16_t*>(at), p.width};
}

PoolRows KvPool::Latent(uint32_t layer, uint32_t block, uint32_t rank) {
  const Place& p = places_[layer];
  return {reinterpret_cast<uint16_t*>(Part(block, rank) + p.offset), p.width};
}

float* KvPool::State(uint32_t layer, uint32_t block, uint32_t rank) {
  return reinterpret_cast<float*>(Part(block, rank) + places_[layer].offset);
}

void KvPool::Replicate(uint32_t block) {
  for (uint32_t r = 1; r < ranks_; ++r) {
    for (const ByteRange& s : shared_) std::memcpy(Part(block, r) + s.offset, Part(block, 0) + s.offset, s.bytes);
  }
}

uint32_t KvPool::free_blocks() const {
  MutexLock lock(mu_);
  return static_cast<uint32_t>(free_.size());
}

Result<std::vector<uint32_t>> KvPool::Allocate(uint32_t n) {
  MutexLock lock(mu_);
  if (free_.size() < n) {
    return Status::NoSpace("KV pool: " + std::to_string(n) + " blocks wanted, " +
                           std::to_string(free_.size()) + " free");
  }
  std::vector<uint32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  return out;
}

void KvPool::Free(std::span<const uint32_t> blocks) {
  MutexLock lock(mu_);
  free_.insert(free_.end(), blocks.begin(), blocks.end());
}

std::vector<std::span<std::byte>> KvPool::Pieces(uint32_t block) {
  std::vector<std::span<std::byte>> out;
  if (!layout_.classic()) {
    std::vector<std::span<const std::byte>> parts;
    for (uint32_t r = 0; r < ranks_; ++r) parts.emplace_back(Part(block, r), part_bytes_);
    // Spans into this pool's own (writable) memory; the part sizes were checked by PlanGrouped.
    const auto gather = layout_.AssembleFromRanks(parts);
    for (std::span<const std::byte> s : *gather) out.emplace_back(const_cast<std::byte*>(s.data()), s.size());
    return out;
  }
  // Chunk order (ChunkGeometry): the list is a ScatterList of one chunk.
  const ChunkGeometry geometry(layout_);
  out.resize(geometry.pieces());
  for (uint32_t l = 0; l < layout_.layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      out[ChunkGeometry::PieceIndex(l, kv)] = {reinterpret_cast<std::byte*>(Piece(l, kv, block)),
                                                geometry.piece_bytes};
    }
  }
  return out;
}

std::vector<std::span<const std::byte>> KvPool::ConstPieces(uint32_t block) {
  std::vector<std::span<const std::byte>> out;
  for (std::span<std::byte> p : Pieces(block)) out.emplace_back(p.data(), p.size());
  return out;
}

}  // namespace kvtier::internal
