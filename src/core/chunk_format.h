// The on-storage format of one chunk, shared by every persistent tier (file://, fs://, ...).
//
//   [0, 4096)          header: fields below, little-endian, then zero padding
//   [4096, 4096 + n)   payload: the chunk's KV bytes
//   padding to a multiple of 4096, so the whole file can be read with O_DIRECT
//
// header fields: magic "KVTCHNK1" u64 | version u32 | header size u32 | namespace [32] | key [32] |
//                layout fingerprint u64 | payload bytes u64 | payload xxh3-64 u64 | header xxh3-64 u64
//
// The header's own checksum covers every field before it, so a torn or overwritten header is detected
// before its length is trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

inline constexpr size_t kChunkHeaderSize = 4096;
inline constexpr size_t kChunkAlign = 4096;
inline constexpr uint64_t kChunkMagic = 0x314B4E4843545654ull;  // "TVTCHNK1" read as LE bytes
inline constexpr uint32_t kChunkFormatVersion = 1;

struct ChunkHeader {
  uint32_t version = kChunkFormatVersion;
  ChunkId id;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

inline uint64_t AlignUp(uint64_t n, uint64_t a = kChunkAlign) { return (n + a - 1) / a * a; }

// Bytes a chunk with `payload_bytes` occupies on storage (header + payload + padding).
inline uint64_t StoredChunkBytes(uint64_t payload_bytes) {
  return kChunkHeaderSize + AlignUp(payload_bytes);
}

uint64_t PayloadChecksum(GatherList payload);
uint64_t PayloadChecksum(std::span<const std::byte> payload);

// Writes the header into `out` (kChunkHeaderSize bytes, zero padded).
void EncodeChunkHeader(const ChunkHeader& header, std::span<std::byte, kChunkHeaderSize> out);

// Parses and checks a header. Corruption for a bad magic, size or checksum; VersionMismatch for a
// version this build does not know.
Result<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> in);

// Checks a decoded header against the chunk the caller asked for and the bytes actually stored.
// Corruption when the namespace, key, layout or length disagree (e.g. a file moved into another
// chunk's place, or truncated).
Status CheckChunkHeader(const ChunkHeader& header, const ChunkId& expected, uint64_t stored_bytes);

// Checks a payload against its header's checksum. Corruption on mismatch.
Status CheckPayload(const ChunkHeader& header, std::span<const std::byte> payload);

}  // namespace kvtier::internal
