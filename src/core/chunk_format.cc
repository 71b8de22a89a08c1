#include "core/chunk_format.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstring>
#include <string>

namespace kvtier::internal {
namespace {

constexpr size_t kFieldsEnd = 104;  // bytes covered by the header checksum

void Put64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void Put32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t Get64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t Get32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

uint64_t PayloadChecksum(std::span<const std::byte> payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

uint64_t PayloadChecksum(GatherList payload) {
  if (payload.size() == 1) return PayloadChecksum(payload[0]);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const auto& piece : payload) XXH3_64bits_update(&state, piece.data(), piece.size());
  return XXH3_64bits_digest(&state);
}

void EncodeChunkHeader(const ChunkHeader& h, std::span<std::byte, kChunkHeaderSize> out) {
  std::memset(out.data(), 0, out.size());
  std::byte* p = out.data();
  Put64(p + 0, kChunkMagic);
  Put32(p + 8, h.version);
  Put32(p + 12, static_cast<uint32_t>(kChunkHeaderSize));
  std::memcpy(p + 16, h.id.ns.data(), 32);
  std::memcpy(p + 48, h.id.key.bytes.data(), 32);
  Put64(p + 80, h.id.layout_fingerprint);
  Put64(p + 88, h.payload_bytes);
  Put64(p + 96, h.payload_checksum);
  Put64(p + kFieldsEnd, XXH3_64bits(p, kFieldsEnd));
}

Result<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> in) {
  if (in.size() < kFieldsEnd + 8) return Status::Corruption("chunk header truncated");
  const std::byte* p = in.data();
  if (Get64(p) != kChunkMagic) return Status::Corruption("not a kvtier chunk (bad magic)");
  if (Get64(p + kFieldsEnd) != XXH3_64bits(p, kFieldsEnd)) {
    return Status::Corruption("chunk header checksum mismatch");
  }
  ChunkHeader h;
  h.version = Get32(p + 8);
  if (h.version != kChunkFormatVersion) {
    return Status::VersionMismatch("chunk format version " + std::to_string(h.version) +
                                   " is not known to this build (knows " +
                                   std::to_string(kChunkFormatVersion) + ")");
  }
  if (Get32(p + 12) != kChunkHeaderSize) return Status::Corruption("unexpected chunk header size");
  std::memcpy(h.id.ns.data(), p + 16, 32);
  std::memcpy(h.id.key.bytes.data(), p + 48, 32);
  h.id.layout_fingerprint = Get64(p + 80);
  h.payload_bytes = Get64(p + 88);
  h.payload_checksum = Get64(p + 96);
  if (h.payload_bytes > (4ull << 30)) return Status::Corruption("chunk payload length out of range");
  return h;
}

Status CheckChunkHeader(const ChunkHeader& h, const ChunkId& expected, uint64_t stored_bytes) {
  if (h.id.ns != expected.ns) return Status::Corruption("chunk belongs to another namespace");
  if (!(h.id.key == expected.key)) return Status::Corruption("chunk stored under another key's name");
  if (expected.layout_fingerprint != 0 && h.id.layout_fingerprint != expected.layout_fingerprint) {
    return Status::Corruption("chunk has another layout");
  }
  if (stored_bytes < kChunkHeaderSize + h.payload_bytes) {
    return Status::Corruption("chunk truncated: " + std::to_string(stored_bytes) + " bytes stored, " +
                              std::to_string(kChunkHeaderSize + h.payload_bytes) + " expected");
  }
  return Status::OK();
}

Status CheckPayload(const ChunkHeader& h, std::span<const std::byte> payload) {
  if (payload.size() != h.payload_bytes) return Status::Corruption("chunk payload length mismatch");
  if (PayloadChecksum(payload) != h.payload_checksum) {
    return Status::Corruption("chunk payload checksum mismatch");
  }
  return Status::OK();
}

}  // namespace kvtier::internal
