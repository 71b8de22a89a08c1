// Writes the seed corpora of the chunk fuzz targets (valid chunks and a few near misses) and of the
// shm:// pool target (small real pools), so the committed seeds can be regenerated when a format
// changes: make_seeds <fuzz/corpus dir>.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "tiers/shm/shm_tier.h"

namespace {

using kvtier::internal::ChunkHeader;
using kvtier::internal::kChunkHeaderSize;

kvtier::ChunkId SeedId() {
  kvtier::ChunkId id;
  for (int i = 0; i < 32; ++i) {
    id.ns[i] = static_cast<uint8_t>(i);
    id.key.bytes[i] = static_cast<uint8_t>(255 - i);
  }
  id.layout_fingerprint = 0x1234567890abcdefull;
  return id;
}

std::vector<std::byte> Payload(size_t payload_bytes, uint8_t fill) {
  std::vector<std::byte> payload(payload_bytes);
  for (size_t i = 0; i < payload_bytes; ++i) payload[i] = std::byte(fill + i * 7);
  return payload;
}

std::vector<std::byte> Assemble(const ChunkHeader& h, const std::vector<std::byte>& payload) {
  std::vector<std::byte> out(kChunkHeaderSize + payload.size());
  kvtier::internal::EncodeChunkHeader(h, std::span<std::byte, kChunkHeaderSize>(out.data(), kChunkHeaderSize));
  if (!payload.empty()) std::memcpy(out.data() + kChunkHeaderSize, payload.data(), payload.size());
  return out;
}

// A v1 chunk (the format older builds wrote).
std::vector<std::byte> MakeChunk(size_t payload_bytes, uint8_t fill) {
  const std::vector<std::byte> payload = Payload(payload_bytes, fill);
  ChunkHeader h;
  h.version = kvtier::internal::kChunkFormatV1;
  h.id = SeedId();
  h.payload_bytes = payload_bytes;
  h.payload_checksum = kvtier::internal::PayloadChecksum(std::span<const std::byte>(payload));
  return Assemble(h, payload);
}

// A plain v2 chunk, or an encrypted one under a fixed seed key.
std::vector<std::byte> MakeV2Chunk(size_t payload_bytes, uint8_t fill, bool encrypted) {
  namespace ki = kvtier::internal;
  std::vector<std::byte> payload = Payload(payload_bytes, fill);
  ChunkHeader h = ki::NewChunkHeader(SeedId(), payload_bytes, encrypted);
  const std::span<const std::byte> all(payload);
  if (!encrypted) {
    for (uint32_t i = 0; i < h.piece_count; ++i) {
      h.piece_sums[i] = ki::PayloadChecksum(all.subspan(h.PieceOffset(i), h.PieceLength(i)));
    }
    return Assemble(h, payload);
  }
  std::vector<std::byte> material(32, std::byte{0x5a});
  auto cipher = ki::ChunkCipher::FromKeyMaterial(material);
  ki::NamespaceKey key;
  if (!cipher.ok() || !(*cipher)->DeriveKey(h.id.ns, &key).ok()) return {};
  for (int i = 0; i < 12; ++i) h.nonce_base[i] = std::byte(0x10 + i);  // seeds are reproducible
  std::vector<std::byte> sealed(payload_bytes);
  for (uint32_t i = 0; i < h.piece_count; ++i) {
    const auto piece = all.subspan(h.PieceOffset(i), h.PieceLength(i));
    if (!ki::SealPiece(&h, key, i, kvtier::GatherList(&piece, 1),
                       std::span(sealed).subspan(h.PieceOffset(i), h.PieceLength(i))).ok()) {
      return {};
    }
  }
  return Assemble(h, sealed);
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

// A small real shm:// pool (page=256, four chunks in two namespaces, one empty), as its file's bytes.
std::vector<std::byte> MakeShmPool(const std::string& scratch) {
  std::filesystem::create_directories(scratch);
  auto url = kvtier::TierUrl::Parse("shm://seed?dir=" + scratch + "&capacity=8KiB&page=256");
  if (!url.ok()) return {};
  {
    auto tier = kvtier::internal::OpenShmTier(*url, kvtier::TierOpenOptions{});
    if (!tier.ok()) {
      std::fprintf(stderr, "shm seed: %s\n", tier.status().ToString().c_str());
      return {};
    }
    const size_t sizes[] = {100, 700, 0, 1500};
    for (size_t i = 0; i < 4; ++i) {
      kvtier::ChunkId id = SeedId();
      id.key.bytes[0] = static_cast<uint8_t>(i);
      id.ns[0] = static_cast<uint8_t>(i % 2);
      const std::vector<std::byte> p = Payload(sizes[i], static_cast<uint8_t>(i));
      const std::span<const std::byte> pieces[] = {p};
      (void)(*tier)->Put(id, pieces);
    }
  }
  std::ifstream in(scratch + "/kvtier-shm-seed", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(scratch);
  std::vector<std::byte> out(bytes.size());
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

void WriteRaw(const std::string& path, const std::vector<std::byte>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror(path.c_str());
    return;
  }
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
    Write(t + "seed-v2-valid-64", 0, MakeV2Chunk(64, 7, false));
    Write(t + "seed-v2-valid-8192", 0, MakeV2Chunk(8192, 8, false));
    Write(t + "seed-v2-empty-payload", 0, MakeV2Chunk(0, 9, false));
    Write(t + "seed-v2-encrypted-4096", 0, MakeV2Chunk(4096, 10, true));
    auto v2flip = MakeV2Chunk(4096, 11, false);
    v2flip[kChunkHeaderSize + 100] ^= std::byte{0x01};
    Write(t + "seed-v2-payload-flip", 0, v2flip);
    auto v2repair = MakeV2Chunk(256, 12, false);
    v2repair[130] ^= std::byte{0x01};  // a piece sum changed: reached only in v2 repair mode
    Write(t + "seed-v2-repair-table", 2, v2repair);
  }
  const std::string shm = dir + "/shm_pool/";
  const std::string scratch = std::filesystem::absolute(dir + "/../corpus-work/shm-seed-scratch").lexically_normal().string();
  WriteRaw(shm + "seed-pool", MakeShmPool(scratch));
  std::vector<std::byte> header = MakeShmPool(scratch);
  header.resize(std::min<size_t>(header.size(), 4096));
  WriteRaw(shm + "seed-header-only", header);
  const std::string not_pool = "not a kvtier pool\n";
  WriteRaw(shm + "seed-not-a-pool", std::vector<std::byte>(reinterpret_cast<const std::byte*>(not_pool.data()),
                                                            reinterpret_cast<const std::byte*>(not_pool.data()) + not_pool.size()));
  return 0;
}
