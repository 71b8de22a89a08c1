// Encoding a chunk (core/chunk_format.h) in memory, shared by every writer: the file writer
// (io/chunk_writer.cc) streams it into a file with padding; the object tier (object/object_tier.h)
// sends header and payload as one object without padding.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "core/chunk_cipher.h"
#include "core/chunk_format.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

// A plain v2 header for `payload`: per-piece xxh3-64 sums filled in.
ChunkHeader PlainChunkHeader(const ChunkId& id, GatherList payload);

// The sealing of one encrypted v2 chunk: its header (a fresh random nonce base; each piece's tag as
// the piece is sealed) and the namespace's derived key. Seal may run for different pieces on several
// threads at once: each call writes only its piece's tag and its own `out`.
class ChunkSealer {
 public:
  ChunkSealer() = default;
  ChunkSealer(const ChunkSealer&) = delete;
  ChunkSealer& operator=(const ChunkSealer&) = delete;

  // Before any Seal: the header of chunk `id` with `payload_bytes`, its nonce base and key.
  Status Start(const ChunkId& id, uint64_t payload_bytes, const ChunkCipher& cipher);
  uint32_t pieces() const { return header_.piece_count; }
  uint64_t PieceLength(uint32_t i) const { return header_.PieceLength(i); }
  // Encrypts piece `i` of `payload` (the whole chunk's) into `out`, exactly the piece's length.
  Status Seal(uint32_t i, GatherList payload, std::span<std::byte> out);
  // The header, complete once every piece is sealed.
  const ChunkHeader& header() const { return header_; }

 private:
  ChunkHeader header_;
  NamespaceKey key_;
};

// Seals every piece of `payload` as an encrypted v2 chunk of `id`: piece i is encrypted into
// `out(i, len)` (len = its length), then `done(i, sealed)` runs (e.g. to write it out). Returns the
// header with its random nonce base and the tags filled in.
using SealTarget = std::function<std::span<std::byte>(uint32_t piece, uint64_t len)>;
using SealSink = std::function<Status(uint32_t piece, std::span<const std::byte> sealed)>;
Result<ChunkHeader> SealChunk(const ChunkId& id, GatherList payload, const ChunkCipher& cipher,
                              const SealTarget& out, const SealSink& done);

// A whole chunk image in memory: header then payload, no padding. Not movable: `parts` points into it.
struct EncodedChunk {
  EncodedChunk() = default;
  EncodedChunk(const EncodedChunk&) = delete;
  EncodedChunk& operator=(const EncodedChunk&) = delete;

  std::array<std::byte, kChunkHeaderSize> header{};
  std::vector<std::byte> sealed;                    // encrypted: the ciphertext
  std::vector<std::span<const std::byte>> parts;    // header, then the payload (caller's spans or `sealed`)
  uint64_t bytes = 0;                               // kChunkHeaderSize + payload bytes
};

// Encodes chunk `id` into `out`: plain (the caller's payload spans are referenced, not copied; they
// must outlive `out`) or, with `cipher`, encrypted into out->sealed.
Status EncodeChunk(const ChunkId& id, GatherList payload, const ChunkCipher* cipher, EncodedChunk* out);

}  // namespace kvtier::internal
