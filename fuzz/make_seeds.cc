// Writes the seed corpora of the chunk fuzz targets (valid chunks and a few near misses), so the
// committed seeds can be regenerated when the chunk format changes: make_seeds <fuzz/corpus dir>.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/chunk_format.h"

namespace {

using kvtier::internal::ChunkHeader;
using kvtier::internal::kChunkHeaderSize;

std::vector<std::byte> MakeChunk(size_t payload_bytes, uint8_t fill) {
  std::vector<std::byte> payload(payload_bytes);
  for (size_t i = 0; i < payload_bytes; ++i) payload[i] = std::byte(fill + i * 7);
  ChunkHeader h;
  for (int i = 0; i < 32; ++i) {
    h.id.ns[i] = static_cast<uint8_t>(i);
    h.id.key.bytes[i] = static_cast<uint8_t>(255 - i);
  }
  h.id.layout_fingerprint = 0x1234567890abcdefull;
  h.payload_bytes = payload_bytes;
  h.payload_checksum = kvtier::internal::PayloadChecksum(std::span<const std::byte>(payload));
  std::vector<std::byte> out(kChunkHeaderSize + payload_bytes);
  kvtier::internal::EncodeChunkHeader(h, std::span<std::byte, kChunkHeaderSize>(out.data(), kChunkHeaderSize));
  std::memcpy(out.data() + kChunkHeaderSize, payload.data(), payload_bytes);
  return out;
}

void Write(const std::string& path, uint8_t mode, const std::vector<std::byte>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror(path.c_str());
    return;
  }
  std::fputc(mode, f);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  for (const char* target : {"chunk_header", "chunk_file"}) {
    const std::string t = dir + "/" + target + "/";
    Write(t + "seed-valid-64", 0, MakeChunk(64, 1));
    Write(t + "seed-valid-4096", 0, MakeChunk(4096, 2));
    Write(t + "seed-empty-payload", 0, MakeChunk(0, 3));
    auto truncated = MakeChunk(512, 4);
    truncated.resize(kChunkHeaderSize + 100);
    Write(t + "seed-truncated", 0, truncated);
    auto flipped = MakeChunk(256, 5);
    flipped[kChunkHeaderSize + 10] ^= std::byte{0x40};
    Write(t + "seed-payload-flip", 0, flipped);
    auto repaired = MakeChunk(128, 6);
    repaired[8] = std::byte{2};  // version 2: reached only in repair mode
    Write(t + "seed-repair-version", 1, repaired);
  }
  return 0;
}
