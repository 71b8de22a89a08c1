// The on-storage format of one chunk, shared by every persistent tier (file://, fs://, ...). Full
// layout in docs/architecture.md ("Chunk format"); encryption in docs/encryption.md.
//
//   [0, 4096)          header: fields below, little-endian, then zero padding
//   [4096, 4096 + n)   payload: the chunk's KV bytes (v2 encrypted: AES-256-GCM ciphertext, same length)
//   padding to a multiple of 4096, so the whole file can be read with O_DIRECT
//
// Every version starts with the magic, whose bytes in file order are "TVTCHNK1" (the "1" is part of
// the magic, not the version), then version u32 and header size u32.
//
// v1 (read only): magic u64 | version u32 = 1 | header size u32 | namespace [32] | key [32] |
//   layout fingerprint u64 | payload bytes u64 | payload xxh3-64 u64 | header xxh3-64 u64 of [0, 104)
//
// v2 (written): magic u64 | version u32 = 2 | header size u32 | namespace [32] | key [32] |
//   layout fingerprint u64 | payload bytes u64 | flags u32 (bit 0: encrypted) | piece bytes u32 |
//   piece count u32 | reserved u32 = 0 | nonce base [12] | reserved [4] = 0      -- [0, 128)
//   piece table at 128: per piece, xxh3-64 u64 of the piece (plain) or its AES-GCM tag [16]
//   (encrypted); zeros up to 4088 | header xxh3-64 u64 of [0, 4088) at 4088.
//   The payload is cut into `piece count` pieces of `piece bytes` (the last one shorter); an empty
//   payload has one empty piece. Piece bytes is a power of two from 1 MiB up, the smallest that keeps
//   the count at or below kMaxPieces, so the table always fits the 4 KiB header (4 GiB: 32 MiB pieces).
//   Encrypted piece i: nonce = nonce base XOR i (big-endian, last four bytes); associated data =
//   header bytes [0, 128) followed by i as u32.
//   Flag bit 1, listed pieces (written for grouped layouts, Layout::PieceLengths): the pieces have the
//   lengths the writer chose, so that a tensor-parallel rank's heads are whole pieces. Piece bytes is
//   0; the table holds the sums (or tags), then each piece's length as u32, at most kMaxListedPieces
//   of them, each 1 byte to kMaxPieceBytes, adding up to the payload. A length needs no
//   authentication: a piece authenticates its own bytes at its own index, so lengths that cut the
//   payload differently fail to verify. Builds before listed pieces refuse such a chunk (unknown flag).
//
// The header's own checksum covers every field before it, so a torn or overwritten header is detected
// before its length is trusted; only the GCM tags defend against someone who rewrites checksums.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/chunk_cipher.h"
#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

inline constexpr size_t kChunkHeaderSize = 4096;
inline constexpr size_t kChunkAlign = 4096;
inline constexpr uint64_t kChunkMagic = 0x314B4E4843545654ull;  // "TVTCHNK1" read as LE bytes
inline constexpr uint32_t kChunkFormatV1 = 1;
inline constexpr uint32_t kChunkFormatVersion = 2;  // the version this build writes
inline constexpr uint32_t kChunkFlagEncrypted = 1;
inline constexpr uint32_t kChunkFlagListedPieces = 2;
inline constexpr uint64_t kMaxChunkPayload = 4ull << 30;
inline constexpr uint32_t kMinPieceBytes = 1u << 20;
inline constexpr uint32_t kMaxPieceBytes = 1u << 30;
inline constexpr uint32_t kMaxPieces = 240;          // 240 tags of 16 bytes fit before 4088
inline constexpr uint32_t kMaxListedPieces = 192;    // 192 tags and lengths (20 bytes each) fit too
inline constexpr size_t kAuthenticatedHeaderBytes = 128;  // v2 fields before the piece table
inline constexpr size_t kPieceAadBytes = kAuthenticatedHeaderBytes + 4;

struct ChunkHeader {
  uint32_t version = kChunkFormatVersion;
  ChunkId id;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // v1: xxh3-64 of the whole payload
  // v2 only:
  uint32_t flags = 0;
  uint32_t piece_bytes = 0;
  uint32_t piece_count = 0;
  Nonce nonce_base{};               // encrypted: random per write
  std::vector<uint64_t> piece_sums;  // plain: xxh3-64 per piece
  std::vector<Tag> piece_tags;       // encrypted: AES-GCM tag per piece
  std::vector<uint64_t> piece_starts;  // listed pieces: offset of each piece, then the payload size

  bool encrypted() const { return version >= 2 && (flags & kChunkFlagEncrypted) != 0; }
  bool listed() const { return version >= 2 && (flags & kChunkFlagListedPieces) != 0; }
  // Pieces a reader verifies one by one: v1 has one, the whole payload.
  uint32_t pieces() const { return version == kChunkFormatV1 ? 1 : piece_count; }
  uint64_t PieceOffset(uint32_t i) const;
  uint64_t PieceLength(uint32_t i) const;
  // The piece holding payload byte `offset` (the last piece for an offset at or past the end).
  uint32_t PieceAt(uint64_t offset) const;
};

inline uint64_t AlignUp(uint64_t n, uint64_t a = kChunkAlign) { return (n + a - 1) / a * a; }

// Bytes a chunk with `payload_bytes` occupies on storage (header + payload + padding).
inline uint64_t StoredChunkBytes(uint64_t payload_bytes) {
  return kChunkHeaderSize + AlignUp(payload_bytes);
}

// The piece size a v2 writer uses for a payload of `payload_bytes` (at most kMaxChunkPayload).
uint32_t PieceBytesFor(uint64_t payload_bytes);

// A v2 header for `id` with its piece geometry set and an empty table of the right size (tags for
// `encrypted`, sums otherwise). The caller fills the table (and the nonce base when encrypted).
// Listed pieces when `id.piece_lengths` (ChunkId) describes this payload; power-of-two pieces otherwise.
ChunkHeader NewChunkHeader(const ChunkId& id, uint64_t payload_bytes, bool encrypted);

// Checks byte ranges of a payload of `payload_bytes` for a ranged read into `dst_bytes`: non-empty,
// ascending, disjoint, within the payload, adding up to the destination. InvalidArgument otherwise.
Status CheckByteRanges(std::span<const ByteRange> ranges, uint64_t payload_bytes, uint64_t dst_bytes);

uint64_t PayloadChecksum(GatherList payload);
uint64_t PayloadChecksum(std::span<const std::byte> payload);

// The spans covering [offset, offset + len) of `list`, appended to `out` (cleared first).
void SubList(GatherList list, uint64_t offset, uint64_t len, std::vector<std::span<const std::byte>>& out);
void SubList(ScatterList list, uint64_t offset, uint64_t len, std::vector<std::span<std::byte>>& out);

// Writes the header into `out` (kChunkHeaderSize bytes, zero padded), in the layout of h.version
// (v1 only for tests and tools that need old files).
void EncodeChunkHeader(const ChunkHeader& header, std::span<std::byte, kChunkHeaderSize> out);

// Parses and checks a header. Corruption for a bad magic, size, checksum or piece geometry;
// VersionMismatch for a version this build does not know.
Result<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> in);

// Checks a decoded header against the chunk the caller asked for and the bytes actually stored.
// Corruption when the namespace, key, layout or length disagree (e.g. a file moved into another
// chunk's place, or truncated).
Status CheckChunkHeader(const ChunkHeader& header, const ChunkId& expected, uint64_t stored_bytes);

// Checks a whole plain payload (v1 or v2) against its header. Corruption on mismatch or for an
// encrypted chunk.
Status CheckPayload(const ChunkHeader& header, std::span<const std::byte> payload);

// Per-piece integrity, usable on any thread and in any order:
// the xxh3-64 of piece `i` of a plain chunk (v1: the whole payload) against the header.
Status CheckPiece(const ChunkHeader& header, uint32_t i, GatherList piece);
// The associated data of encrypted piece `i`.
std::array<std::byte, kPieceAadBytes> PieceAad(const ChunkHeader& header, uint32_t i);
// Encrypts piece `i` of the payload into `out` and stores its tag in header->piece_tags[i].
Status SealPiece(ChunkHeader* header, const NamespaceKey& key, uint32_t i, GatherList in, std::span<std::byte> out);
// Authenticates and decrypts piece `i` from `in` into `out` (may be the same memory). Corruption when
// it does not authenticate.
Status OpenPiece(const ChunkHeader& header, const NamespaceKey& key, uint32_t i, GatherList in, ScatterList out);

}  // namespace kvtier::internal
