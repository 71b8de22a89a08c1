// A file:// pool written by kvtier before layouts had groups (commit 6efcd0e), committed under
// fixtures/pool-6efcd0e: this build must find and load every chunk of it byte for byte. It holds two
// v2 chunks (the format written then) and one v1 chunk (read only since v2), of two namespaces.
//
// KVTIER_WRITE_POOL_FIXTURE=<empty dir> makes the first test write the fixture instead (how it was
// made); the directory is then copied into the source tree. Never rewrite the committed one: it is the
// proof that pools written by older builds stay readable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "kvtier/keys.h"
#include "kvtier/tier.h"
#include "tiers/file/file_tier.h"

namespace kvtier {
namespace {

// What each fixture chunk is made of: its namespace, its tokens and its bytes all follow from `n`.
struct FixtureChunk {
  uint32_t n;
  uint32_t format_version;
};
constexpr FixtureChunk kChunks[] = {{0, 2}, {1, 2}, {2, 1}};

Layout FixtureLayout(uint32_t n) {
  // Two classic layouts: a bf16 one and an fp16 one of another shape (the second namespace).
  return n < 2 ? Layout{2, 2, 8, DType::kBF16, 16} : Layout{3, 1, 4, DType::kFP16, 8};
}

Namespace FixtureNamespace(uint32_t n) {
  return Namespace::Make("fixture/model-" + std::to_string(n < 2 ? 0 : 1), FixtureLayout(n), "tenant").value();
}

ChunkKey FixtureKey(const Namespace& ns, uint32_t n) {
  std::vector<uint32_t> tokens(ns.layout().tokens_per_chunk);
  for (uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = 1000 * n + i;
  return NextChunkKey(ns, nullptr, tokens);
}

std::vector<std::byte> FixturePayload(const Namespace& ns, uint32_t n) {
  std::vector<std::byte> out(ns.layout().BytesPerChunk());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>((i * 31 + n * 7 + (i >> 8)) & 0xff);
  return out;
}

std::string FixtureDir() {
  return std::string(KVTIER_FIXTURE_DIR) + "/pool-6efcd0e";
}

// Writes chunk `c` as a v1 file: the v1 header, then the payload padded to 4 KiB.
void WriteV1(const std::string& dir, const ChunkId& id, const std::vector<std::byte>& payload) {
  internal::ChunkHeader h;
  h.version = internal::kChunkFormatV1;
  h.id = id;
  h.payload_bytes = payload.size();
  h.payload_checksum = internal::PayloadChecksum(std::span<const std::byte>(payload));
  std::vector<std::byte> file(internal::StoredChunkBytes(payload.size()));
  internal::EncodeChunkHeader(h, std::span<std::byte, internal::kChunkHeaderSize>(file.data(), internal::kChunkHeaderSize));
  std::copy(payload.begin(), payload.end(), file.begin() + internal::kChunkHeaderSize);
  const std::string path = internal::FileChunkPathForTesting(dir, id);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), file.size());
}

TEST(PoolFixtureTest, WriteWhenAsked) {
  const char* out = std::getenv("KVTIER_WRITE_POOL_FIXTURE");
  if (out == nullptr) GTEST_SKIP() << "KVTIER_WRITE_POOL_FIXTURE not set: the committed fixture is used";
  {
    internal::FileTierOptions o;
    o.dir = out;
    auto tier = internal::OpenFileTier(o);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    for (const FixtureChunk& c : kChunks) {
      if (c.format_version != 2) continue;
      const Namespace ns = FixtureNamespace(c.n);
      const auto payload = FixturePayload(ns, c.n);
      const std::span<const std::byte> src(payload);
      ASSERT_TRUE((*tier)->Put(ChunkId::Of(ns, FixtureKey(ns, c.n)), GatherList(&src, 1)).ok());
    }
  }
  for (const FixtureChunk& c : kChunks) {
    if (c.format_version != 1) continue;
    const Namespace ns = FixtureNamespace(c.n);
    WriteV1(out, ChunkId::Of(ns, FixtureKey(ns, c.n)), FixturePayload(ns, c.n));
  }
}

TEST(PoolFixtureTest, EveryChunkLoadsByteExact) {
  internal::FileTierOptions look;
  look.dir = FixtureDir();
  look.read_only = true;  // the committed directory is never changed
  auto tier = internal::OpenFileTier(look);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  for (const FixtureChunk& c : kChunks) {
    const Namespace ns = FixtureNamespace(c.n);
    const ChunkId id = ChunkId::Of(ns, FixtureKey(ns, c.n));
    ASSERT_TRUE((*tier)->Contains(id)) << "chunk " << c.n;
    std::vector<std::byte> got(ns.layout().BytesPerChunk());
    const std::span<std::byte> dst(got);
    ASSERT_TRUE((*tier)->Get(id, ScatterList(&dst, 1)).ok()) << "chunk " << c.n;
    EXPECT_EQ(got, FixturePayload(ns, c.n)) << "chunk " << c.n;
  }
  EXPECT_EQ((*tier)->Stats().chunks, std::size(kChunks));
}

}  // namespace
}  // namespace kvtier
