#include "io/chunk_encode.h"

namespace kvtier::internal {

ChunkHeader PlainChunkHeader(const ChunkId& id, GatherList payload) {
  ChunkHeader header = NewChunkHeader(id, TotalBytes(payload), /*encrypted=*/false);
  std::vector<std::span<const std::byte>> piece;
  for (uint32_t i = 0; i < header.piece_count; ++i) {
    SubList(payload, header.PieceOffset(i), header.PieceLength(i), piece);
    header.piece_sums[i] = PayloadChecksum(GatherList(piece));
  }
  return header;
}

Status ChunkSealer::Start(const ChunkId& id, uint64_t payload_bytes, const ChunkCipher& cipher) {
  header_ = NewChunkHeader(id, payload_bytes, /*encrypted=*/true);
  KVTIER_ASSIGN_OR_RETURN(header_.nonce_base, ChunkCipher::RandomNonceBase());
  return cipher.DeriveKey(id.ns, &key_);
}

Status ChunkSealer::Seal(uint32_t i, GatherList payload, std::span<std::byte> out) {
  if (i >= header_.piece_count || out.size() != header_.PieceLength(i)) {
    return Status::Internal("encrypted write: a piece's target does not match it");
  }
  std::vector<std::span<const std::byte>> piece;
  SubList(payload, header_.PieceOffset(i), out.size(), piece);
  return SealPiece(&header_, key_, i, piece, out);
}

Result<ChunkHeader> SealChunk(const ChunkId& id, GatherList payload, const ChunkCipher& cipher,
                              const SealTarget& out, const SealSink& done) {
  ChunkSealer sealer;
  KVTIER_RETURN_IF_ERROR(sealer.Start(id, TotalBytes(payload), cipher));
  for (uint32_t i = 0; i < sealer.pieces(); ++i) {
    const uint64_t len = sealer.PieceLength(i);
    const std::span<std::byte> target = out(i, len);
    if (target.size() != len) return Status::IOError("out of memory for an encrypted write", true);
    KVTIER_RETURN_IF_ERROR(sealer.Seal(i, payload, target));
    KVTIER_RETURN_IF_ERROR(done(i, target));
  }
  return sealer.header();
}

Status EncodeChunk(const ChunkId& id, GatherList payload, const ChunkCipher* cipher, EncodedChunk* out) {
  const uint64_t n = TotalBytes(payload);
  if (n > kMaxChunkPayload) return Status::InvalidArgument("chunk payload over 4 GiB");
  out->parts.clear();
  out->parts.push_back(out->header);
  out->bytes = kChunkHeaderSize + n;
  if (cipher == nullptr) {
    EncodeChunkHeader(PlainChunkHeader(id, payload), out->header);
    for (const auto& p : payload) {
      if (!p.empty()) out->parts.push_back(p);
    }
    return Status::OK();
  }
  out->sealed.resize(n);
  uint64_t offset = 0;  // pieces are sealed in order, each right after the one before
  auto target_at = [&](uint32_t, uint64_t len) {
    return std::span<std::byte>(out->sealed).subspan(offset, len);
  };
  auto advance = [&](uint32_t, std::span<const std::byte> sealed) {
    offset += sealed.size();
    return Status::OK();
  };
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, SealChunk(id, payload, *cipher, target_at, advance));
  EncodeChunkHeader(header, out->header);
  if (n > 0) out->parts.push_back(out->sealed);
  return Status::OK();
}

}  // namespace kvtier::internal
