#include "eval/engine/kv_pool.h"

#include <new>
#include <string>

#include "core/chunk_geometry.h"

namespace kvtier::internal {

Result<std::unique_ptr<KvPool>> KvPool::Create(const Layout& layout, uint64_t pool_bytes) {
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  if (DTypeBytes(layout.dtype) != 2) {
    return Status::InvalidArgument("the KV pool keeps a 16-bit dtype, not " +
                                   std::string(DTypeName(layout.dtype)));
  }
  uint64_t blocks = pool_bytes / layout.BytesPerChunk();
  if (blocks == 0) {
    return Status::NoSpace("a KV pool of " + FormatBytes(pool_bytes) + " holds no block of " +
                           FormatBytes(layout.BytesPerChunk()));
  }
  if (blocks > UINT32_MAX) return Status::InvalidArgument("KV pool has too many blocks");
  std::unique_ptr<KvPool> pool(new KvPool(layout, static_cast<uint32_t>(blocks)));
  // Not value-initialised: pages are only touched when a block is first written.
  pool->data_ = AlignedBuffer::Allocate(blocks * layout.BytesPerChunk(), size_t{2} << 20);
  if (pool->data_.data() == nullptr) return Status::NoSpace("cannot allocate a KV pool of " + FormatBytes(pool_bytes));
  return pool;
}

KvPool::KvPool(const Layout& layout, uint32_t blocks)
    : layout_(layout),
      blocks_(blocks),
      row_(size_t{layout.kv_heads} * layout.head_dim),
      piece_(row_ * layout.tokens_per_chunk) {
  free_.reserve(blocks);
  for (uint32_t b = blocks; b > 0; --b) free_.push_back(b - 1);  // hand out low blocks first
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
