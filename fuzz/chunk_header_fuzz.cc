// Fuzz target: the chunk header decoder and the header/payload checks, which read bytes from storage
// (possibly another host's, possibly corrupt). Properties: no crash; an accepted header re-encodes to
// the same bytes; the checks accept exactly what they should.
//
// Input: byte 0 picks a mode; 0 = the rest is a raw header; 1 = the rest is a v1 header whose magic and
// header checksum are repaired first, so the fuzzer reaches the checks behind the checksum; 2 = the
// same for a v2 header (magic, version 2, header size and the checksum at 4088 repaired).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/chunk_format.h"
#include "fuzz_check.h"

namespace kvtier::fuzz {
namespace {

using internal::ChunkHeader;
using internal::kChunkHeaderSize;

constexpr size_t kFieldsEnd = 104;     // v1: bytes covered by the header checksum (see chunk_format.h)
constexpr size_t kV2ChecksumAt = 4088;  // v2: the header checksum covers [0, 4088)

void RepairHeader(std::vector<std::byte>& buf) {
  if (buf.size() < kFieldsEnd + 8) return;
  const uint64_t magic = internal::kChunkMagic;
  std::memcpy(buf.data(), &magic, 8);  // little-endian host, as the format
  const uint64_t sum = internal::PayloadChecksum(std::span<const std::byte>(buf.data(), kFieldsEnd));
  std::memcpy(buf.data() + kFieldsEnd, &sum, 8);
}

void RepairV2Header(std::vector<std::byte>& buf) {
  if (buf.size() < kChunkHeaderSize) return;
  const uint64_t magic = internal::kChunkMagic;
  const uint32_t version = 2, size = kChunkHeaderSize;
  std::memcpy(buf.data(), &magic, 8);
  if (static_cast<uint8_t>(buf[8]) % 4 != 3) std::memcpy(buf.data() + 8, &version, 4);  // else keep: newer versions
  std::memcpy(buf.data() + 12, &size, 4);
  const uint64_t sum = internal::PayloadChecksum(std::span<const std::byte>(buf.data(), kV2ChecksumAt));
  std::memcpy(buf.data() + kV2ChecksumAt, &sum, 8);
}

void CheckAccepted(const ChunkHeader& h, std::span<const std::byte> in) {
  KVTIER_FUZZ_CHECK(h.version == internal::kChunkFormatV1 || h.version == internal::kChunkFormatVersion);
  KVTIER_FUZZ_CHECK(h.payload_bytes <= (4ull << 30));
  // Every byte the checksum covers is a field (or checked zero), so an accepted header re-encodes to
  // the same bytes: v1 up to its checksum, v2 the whole header.
  std::vector<std::byte> again(kChunkHeaderSize);
  internal::EncodeChunkHeader(h, std::span<std::byte, kChunkHeaderSize>(again.data(), kChunkHeaderSize));
  const size_t covered = h.version == internal::kChunkFormatV1 ? kFieldsEnd + 8 : kChunkHeaderSize;
  KVTIER_FUZZ_CHECK(std::memcmp(again.data(), in.data(), covered) == 0);
  if (h.version == internal::kChunkFormatVersion) {
    KVTIER_FUZZ_CHECK(h.pieces() >= 1 && h.pieces() <= internal::kMaxPieces);
    KVTIER_FUZZ_CHECK(h.PieceOffset(h.pieces() - 1) + h.PieceLength(h.pieces() - 1) == h.payload_bytes);
  }

  const uint64_t stored = in.size();
  const bool long_enough = stored >= kChunkHeaderSize + h.payload_bytes;
  KVTIER_FUZZ_CHECK(internal::CheckChunkHeader(h, h.id, stored).ok() == long_enough);
  ChunkId other = h.id;
  other.key.bytes[0] ^= 1;
  KVTIER_FUZZ_CHECK(internal::CheckChunkHeader(h, other, stored).IsCorruption());
  other = h.id;
  other.ns[31] ^= 0x80;
  KVTIER_FUZZ_CHECK(internal::CheckChunkHeader(h, other, stored).IsCorruption());
  other = h.id;
  other.layout_fingerprint = h.id.layout_fingerprint + 1;
  if (other.layout_fingerprint != 0) {
    KVTIER_FUZZ_CHECK(internal::CheckChunkHeader(h, other, stored).IsCorruption());
  }
  if (long_enough && stored > kChunkHeaderSize) {
    auto payload = in.subspan(kChunkHeaderSize, h.payload_bytes);
    bool sum_ok = !h.encrypted();  // an encrypted payload never passes a keyless check
    for (uint32_t i = 0; sum_ok && i < h.pieces(); ++i) {
      const uint64_t want = h.version == internal::kChunkFormatV1 ? h.payload_checksum : h.piece_sums[i];
      sum_ok = internal::PayloadChecksum(payload.subspan(h.PieceOffset(i), h.PieceLength(i))) == want;
    }
    KVTIER_FUZZ_CHECK(internal::CheckPayload(h, payload).ok() == sum_ok);
  }
}

}  // namespace

int FuzzChunkHeader(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  std::vector<std::byte> buf(size - 1);
  if (!buf.empty()) std::memcpy(buf.data(), data + 1, size - 1);
  if (mode == 1) RepairHeader(buf);
  if (mode == 2) RepairV2Header(buf);
  auto r = internal::DecodeChunkHeader(buf);
  if (r.ok()) {
    CheckAccepted(*r, buf);
  } else {
    const Code c = r.status().code();
    KVTIER_FUZZ_CHECK(c == Code::kCorruption || c == Code::kVersionMismatch);
  }
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzChunkHeader)
