// Fuzz target: the chunk header decoder and the header/payload checks, which read bytes from storage
// (possibly another host's, possibly corrupt). Properties: no crash; an accepted header re-encodes to
// the same bytes; the checks accept exactly what they should.
//
// Input: byte 0 picks a mode; 0 = the rest is a raw header; 1 = the rest is a header whose magic and
// header checksum are repaired first, so the fuzzer reaches the checks behind the checksum.
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

constexpr size_t kFieldsEnd = 104;  // bytes covered by the header checksum (see chunk_format.h)

void RepairHeader(std::vector<std::byte>& buf) {
  if (buf.size() < kFieldsEnd + 8) return;
  const uint64_t magic = internal::kChunkMagic;
  std::memcpy(buf.data(), &magic, 8);  // little-endian host, as the format
  const uint64_t sum = internal::PayloadChecksum(std::span<const std::byte>(buf.data(), kFieldsEnd));
  std::memcpy(buf.data() + kFieldsEnd, &sum, 8);
}

void CheckAccepted(const ChunkHeader& h, std::span<const std::byte> in) {
  KVTIER_FUZZ_CHECK(h.version == internal::kChunkFormatVersion);
  KVTIER_FUZZ_CHECK(h.payload_bytes <= (4ull << 30));
  // Every byte the checksum covers is a field, so an accepted header re-encodes to the same bytes.
  std::vector<std::byte> again(kChunkHeaderSize);
  internal::EncodeChunkHeader(h, std::span<std::byte, kChunkHeaderSize>(again.data(), kChunkHeaderSize));
  KVTIER_FUZZ_CHECK(std::memcmp(again.data(), in.data(), kFieldsEnd + 8) == 0);

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
    const bool sum_ok = internal::PayloadChecksum(payload) == h.payload_checksum;
    KVTIER_FUZZ_CHECK(internal::CheckPayload(h, payload).ok() == sum_ok);
  }
}

}  // namespace

int FuzzChunkHeader(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 2;
  std::vector<std::byte> buf(size - 1);
  if (!buf.empty()) std::memcpy(buf.data(), data + 1, size - 1);
  if (mode == 1) RepairHeader(buf);
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
