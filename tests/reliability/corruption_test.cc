// Corruption matrix for the persistent tiers (file://, fs://): bytes flipped, files truncated or
// zeroed, two chunk files swapped, a chunk of another namespace or layout moved into place. Every
// injection must be detected on read (Corruption), counted in TierStats::corrupt, removed from storage
// and served as a miss afterwards; the untouched chunks keep reading back exactly. Injected and
// detected counts must be equal.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "kvtier/tier.h"
#include "reliability/test_util.h"

namespace kvtier::reltest {
namespace {

namespace fs = std::filesystem;

enum class Damage { kFlip, kTruncate, kZero, kSwap, kOtherNamespace, kOtherLayout };
constexpr Damage kAllDamage[] = {Damage::kFlip, Damage::kTruncate, Damage::kZero,
                                 Damage::kSwap, Damage::kFlip,     Damage::kOtherNamespace,
                                 Damage::kOtherLayout};

// The published file of a chunk: the one file below `dir` named after its key.
std::string ChunkFile(const std::string& dir, const ChunkKey& key) {
  const std::string hex = key.Hex();
  auto files = FilesUnder(dir, [&](const std::string& n) { return IsChunkName(n) && n.rfind(hex, 0) == 0; });
  return files.size() == 1 ? files[0] : std::string();
}

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Offsets the format covers (header fields and payload); header and file padding carry no data.
size_t CoveredOffset(std::mt19937_64& rng, size_t payload_bytes) {
  const size_t covered_header = 136;  // v2: fields [0, 128) and the first piece's sum
  const size_t pick = rng() % (covered_header + payload_bytes);
  return pick < covered_header ? pick : internal::kChunkHeaderSize + (pick - covered_header);
}

class CorruptionMatrix : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Url(const std::string& dir) const { return GetParam() + "://" + dir; }

  std::unique_ptr<Tier> Open(const std::string& dir) {
    auto t = OpenTier(Url(dir));
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      return nullptr;
    }
    return std::move(t).value();
  }
};

TEST_P(CorruptionMatrix, EveryInjectionIsDetectedRemovedAndAMiss) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/tier", scratch = tmp.path() + "/scratch";
  {
    auto probe = OpenTier(Url(dir));
    if (!probe.ok() && probe.status().code() == Code::kInvalidArgument) {
      GTEST_SKIP() << GetParam() << ":// not available: " << probe.status().ToString();
    }
  }
  auto tier = Open(dir);
  auto other_tier = Open(scratch);
  ASSERT_TRUE(tier && other_tier);
  const Namespace ns = MakeNamespace("tenant-a"), other_ns = MakeNamespace("tenant-b");
  const size_t rounds = Scaled(8, 2);
  const std::vector<ChunkKey> keys = Keys(ns, rounds * std::size(kAllDamage) * 2, 11);
  for (const ChunkKey& k : keys) ASSERT_TRUE(PutExpected(*tier, ns, k).ok());
  const uint64_t corrupt_before = tier->Stats().corrupt;

  std::mt19937_64 rng(6);
  const size_t payload = ns.layout().BytesPerChunk();
  uint64_t injected = 0, detected = 0;
  size_t next = 0;
  std::vector<ChunkKey> damaged;
  for (size_t r = 0; r < rounds; ++r) {
    for (Damage d : kAllDamage) {
      const ChunkKey& a = keys[next++];
      const ChunkKey& b = keys[next++];
      const std::string fa = ChunkFile(dir, a), fb = ChunkFile(dir, b);
      ASSERT_FALSE(fa.empty() || fb.empty());
      std::vector<char> bytes = ReadAll(fa);
      std::vector<ChunkKey> hit = {a};
      switch (d) {
        case Damage::kFlip:
          bytes[CoveredOffset(rng, payload)] ^= static_cast<char>(1 + rng() % 255);
          WriteAll(fa, bytes);
          break;
        case Damage::kTruncate:
          fs::resize_file(fa, rng() % (internal::kChunkHeaderSize + payload));
          break;
        case Damage::kZero: {
          const size_t at = CoveredOffset(rng, payload) & ~size_t{511};
          for (size_t i = at; i < at + 512 && i < bytes.size(); ++i) bytes[i] = 0;
          WriteAll(fa, bytes);
          break;
        }
        case Damage::kSwap:
          fs::rename(fa, fa + ".swap");
          fs::rename(fb, fa);
          fs::rename(fa + ".swap", fb);
          hit.push_back(b);
          break;
        case Damage::kOtherNamespace: {
          // Another tenant's chunk, complete and valid, put where this one is looked for.
          const ChunkKey ok = Keys(other_ns, 1, static_cast<uint32_t>(1000 + r))[0];
          ASSERT_TRUE(PutExpected(*other_tier, other_ns, ok).ok());
          fs::copy_file(ChunkFile(scratch, ok), fa, fs::copy_options::overwrite_existing);
          break;
        }
        case Damage::kOtherLayout: {
          // Same namespace and key, but written for another layout of the same byte size.
          ChunkId id = ChunkId::Of(ns, a);
          id.layout_fingerprint ^= 0x5A5A;
          const std::vector<std::byte> p = PayloadFor(id, payload);
          const std::span<const std::byte> piece(p);
          ASSERT_TRUE(other_tier->Put(id, GatherList(&piece, 1)).ok());
          fs::copy_file(ChunkFile(scratch, a), fa, fs::copy_options::overwrite_existing);
          ASSERT_TRUE(other_tier->Remove(id).ok());
          break;
        }
      }
      for (const ChunkKey& k : hit) {
        ++injected;
        const Status s = GetAndVerify(*tier, ns, k);
        EXPECT_TRUE(s.IsCorruption()) << "damage " << static_cast<int>(d) << ": " << s.ToString();
        if (s.IsCorruption()) ++detected;
        EXPECT_TRUE(GetAndVerify(*tier, ns, k).IsNotFound()) << "a corrupt chunk was not removed";
        EXPECT_FALSE(tier->Contains(ChunkId::Of(ns, k)));
        EXPECT_TRUE(ChunkFile(dir, k).empty()) << "the corrupt file is still on disk";
        damaged.push_back(k);
      }
    }
  }
  EXPECT_EQ(injected, detected);
  EXPECT_EQ(tier->Stats().corrupt - corrupt_before, injected);
  // Every chunk that was not damaged still reads back exactly, after a restart too.
  tier.reset();
  tier = Open(dir);
  ASSERT_TRUE(tier);
  size_t intact = 0;
  for (const ChunkKey& k : keys) {
    if (std::find(damaged.begin(), damaged.end(), k) != damaged.end()) {
      EXPECT_TRUE(GetAndVerify(*tier, ns, k).IsNotFound());
      continue;
    }
    const Status s = GetAndVerify(*tier, ns, k);
    EXPECT_TRUE(s.ok()) << s.ToString();
    intact += s.ok();
  }
  std::printf("[reliability] %s:// corruptions injected %llu, detected %llu, intact chunks %zu\n",
              GetParam().c_str(), static_cast<unsigned long long>(injected),
              static_cast<unsigned long long>(detected), intact);
}

// Damage done while the tier is closed: after reopening, a damaged chunk is never served as data.
TEST_P(CorruptionMatrix, DamageWhileClosedIsNeverServed) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/tier";
  {
    auto probe = OpenTier(Url(dir));
    if (!probe.ok() && probe.status().code() == Code::kInvalidArgument) GTEST_SKIP();
  }
  const Namespace ns = MakeNamespace("tenant-a");
  const std::vector<ChunkKey> keys = Keys(ns, 24, 12);
  {
    auto tier = Open(dir);
    ASSERT_TRUE(tier);
    for (const ChunkKey& k : keys) ASSERT_TRUE(PutExpected(*tier, ns, k).ok());
  }
  std::mt19937_64 rng(7);
  const size_t payload = ns.layout().BytesPerChunk();
  for (size_t i = 0; i < keys.size(); i += 2) {  // damage every other chunk, three ways in turn
    const std::string f = ChunkFile(dir, keys[i]);
    ASSERT_FALSE(f.empty());
    std::vector<char> bytes = ReadAll(f);
    if (i % 6 == 0) bytes[CoveredOffset(rng, payload)] ^= 0x10;
    if (i % 6 == 2) bytes.resize(internal::kChunkHeaderSize + payload / 2);
    if (i % 6 == 4) std::fill(bytes.begin(), bytes.begin() + 4096, 0);
    WriteAll(f, bytes);
  }
  auto tier = Open(dir);
  ASSERT_TRUE(tier);
  for (size_t i = 0; i < keys.size(); ++i) {
    const Status s = GetAndVerify(*tier, ns, keys[i]);
    if (i % 2 == 0) {
      EXPECT_TRUE(s.IsCorruption() || s.IsNotFound()) << s.ToString();
    } else {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PersistentTiers, CorruptionMatrix, ::testing::Values("file", "fs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier::reltest
