// mem:// specifics beyond the conformance suite: URL options, page accounting, verify=false.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kvtier/tier.h"
#include "tiers/mem/mem_tier.h"

namespace kvtier {
namespace {

ChunkId IdOf(uint8_t n) {
  ChunkId id;
  id.key.bytes[0] = n;
  id.key.bytes[9] = 0x42;
  id.layout_fingerprint = 7;
  return id;
}

TEST(MemTierTest, OptionsAreChecked) {
  EXPECT_TRUE(OpenTier("mem://").ok());  // 1 GiB of address space, committed only when used
  EXPECT_TRUE(OpenTier("mem://?capacity=1MiB&page=4KiB&verify=true").ok());
  EXPECT_TRUE(OpenTier("mem://?capacity=1MiB&policy=lru").ok());
  EXPECT_TRUE(OpenTier("mem://?capacity=1MiB&policy=window").ok());
  const char* bad[] = {
      "mem://?capacity=1MiB&pages=4KiB",  // misspelt option
      "mem://?capacity=lots",             // not a size
      "mem://?capacity=1KiB&page=4KiB",   // smaller than one page
      "mem://?page=8",                    // page too small
      "mem://?verify=maybe",              // not a bool
      "mem:///some/path",                 // mem:// has no path
      "mem://?policy=lfu",                // not a policy kvtier has
  };
  for (const char* url : bad) {
    auto t = OpenTier(url);
    EXPECT_FALSE(t.ok()) << url;
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << url;
    }
  }
  auto t = OpenTier("mem://?capacity=1MiB");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE((*t)->capabilities().in_memory);
  EXPECT_FALSE((*t)->capabilities().persistent);
  EXPECT_EQ((*t)->Stats().capacity_bytes, 1u << 20);
}

TEST(MemTierTest, UsageCountsWholePages) {
  auto t = OpenTier("mem://?capacity=4KiB&page=1KiB");
  ASSERT_TRUE(t.ok());
  std::vector<std::byte> p(1025, std::byte{9});  // two pages
  const std::span<const std::byte> pieces[] = {p};
  ASSERT_TRUE((*t)->Put(IdOf(1), pieces).ok());
  EXPECT_EQ((*t)->Stats().usage_bytes, 2048u);
  ASSERT_TRUE((*t)->Put(IdOf(2), pieces).ok());
  EXPECT_EQ((*t)->Stats().usage_bytes, 4096u);
  ASSERT_TRUE((*t)->Put(IdOf(3), pieces).ok());  // evicts the least recent: chunk 1
  EXPECT_EQ((*t)->Stats().usage_bytes, 4096u);
  EXPECT_FALSE((*t)->Contains(IdOf(1)));
  EXPECT_TRUE((*t)->Contains(IdOf(2)));
  EXPECT_EQ((*t)->Stats().evictions, 1u);
}

TEST(MemTierTest, ReadingAChunkKeepsItFromEviction) {
  auto t = OpenTier("mem://?capacity=3KiB&page=1KiB");
  ASSERT_TRUE(t.ok());
  std::vector<std::byte> p(1024, std::byte{1}), out(1024);
  const std::span<const std::byte> in[] = {p};
  const std::span<std::byte> dst[] = {out};
  for (uint8_t i = 1; i <= 3; ++i) ASSERT_TRUE((*t)->Put(IdOf(i), in).ok());
  ASSERT_TRUE((*t)->Get(IdOf(1), dst).ok());  // 1 becomes most recent; 2 is now the oldest
  ASSERT_TRUE((*t)->Put(IdOf(4), in).ok());
  EXPECT_TRUE((*t)->Contains(IdOf(1)));
  EXPECT_FALSE((*t)->Contains(IdOf(2)));
}

// A key as uniform as the SHA-256 keys the Store derives (splitmix64 of n).
ChunkId UniformId(uint64_t n) {
  ChunkId id = IdOf(0);
  for (size_t i = 0; i < id.key.bytes.size(); i += 8) {
    uint64_t z = (n * 4 + i / 8 + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(id.key.bytes.data() + i, &z, sizeof(z));
  }
  return id;
}

// Issue 38: a hot shared prefix, read between bursts of one-shot prompts each larger than the tier,
// keeps being found under policy=window; plain LRU (the default) loses it to every burst.
uint64_t HotPrefixHitsThroughFloods(const char* url) {
  auto t = OpenTier(url);
  EXPECT_TRUE(t.ok()) << url;
  if (!t.ok()) return 0;
  std::vector<std::byte> p(1024, std::byte{1}), out(1024);
  const std::span<const std::byte> in[] = {p};
  const std::span<std::byte> dst[] = {out};
  ChunkId hot[8];
  for (uint8_t i = 0; i < 8; ++i) {
    hot[i] = UniformId(1000000 + i);
    EXPECT_TRUE((*t)->Put(hot[i], in).ok());
  }
  uint64_t hits = 0;
  uint32_t one_shot = 0;
  for (int round = 0; round < 10; ++round) {
    for (const ChunkId& id : hot) {
      if ((*t)->Get(id, dst).ok()) {
        ++hits;
      } else {
        EXPECT_TRUE((*t)->Put(id, in).ok());  // recomputed and saved again, as an engine does
      }
    }
    for (int i = 0; i < 100; ++i) {  // 100 chunks: more than the tier's 64 pages
      EXPECT_TRUE((*t)->Put(UniformId(++one_shot), in).ok());
    }
  }
  return hits;
}

TEST(MemTierTest, HotPrefixSurvivesOneShotFloodUnderTheWindowPolicy) {
  EXPECT_EQ(HotPrefixHitsThroughFloods("mem://?capacity=64KiB&page=1KiB&policy=window"), 80u);
  EXPECT_EQ(HotPrefixHitsThroughFloods("mem://?capacity=64KiB&page=1KiB&policy=lru"), 8u);
  EXPECT_EQ(HotPrefixHitsThroughFloods("mem://?capacity=64KiB&page=1KiB"), 8u);  // lru
}

TEST(MemTierTest, LayoutMismatchIsCorruption) {
  auto t = OpenTier("mem://?capacity=4KiB&page=64");
  ASSERT_TRUE(t.ok());
  std::vector<std::byte> p(100, std::byte{1}), out(100);
  const std::span<const std::byte> in[] = {p};
  const std::span<std::byte> dst[] = {out};
  ASSERT_TRUE((*t)->Put(IdOf(1), in).ok());
  ChunkId other = IdOf(1);
  other.layout_fingerprint = 8;
  EXPECT_TRUE((*t)->Get(other, dst).IsCorruption());
  EXPECT_FALSE((*t)->Contains(IdOf(1)));
}

TEST(MemTierTest, WithoutVerifyDamageIsNotChecked) {
  // Documented trade-off: verify=false keeps no checksum, so damage done behind the tier's back is
  // returned as data (the bytes never left process memory).
  auto t = OpenTier("mem://?capacity=4KiB&page=64");
  ASSERT_TRUE(t.ok());
  std::vector<std::byte> p(100, std::byte{1}), out(100);
  const std::span<const std::byte> in[] = {p};
  const std::span<std::byte> dst[] = {out};
  ASSERT_TRUE((*t)->Put(IdOf(1), in).ok());
  ASSERT_TRUE(internal::CorruptMemChunkForTesting(**t, IdOf(1)).ok());
  EXPECT_TRUE((*t)->Get(IdOf(1), dst).ok());
  EXPECT_NE(out, p);
  EXPECT_TRUE((*t)->Check(ChunkInfo{IdOf(1), 0}).ok());
}

// A verified Get hashes the arena block by block as it copies (PageArena::kReadBlock) into whatever
// pieces the caller gives: a chunk of many blocks over many page runs, into pieces of odd sizes at odd
// addresses, comes back exact; damage in it is Corruption with the destination zeroed.
TEST(MemTierTest, VerifiedCopyOfManyBlocksIntoOddPiecesIsExactAndCatchesDamage) {
  auto t = OpenTier("mem://?capacity=16MiB&page=64KiB&threads=2&verify=true");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<std::byte> p((3u << 20) + 12345);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::byte>(i * 7 + (i >> 12));
  const std::span<const std::byte> in[] = {p};
  ASSERT_TRUE((*t)->Put(IdOf(1), in).ok());
  ASSERT_TRUE((*t)->Put(IdOf(2), in).ok());
  std::vector<std::byte> out(p.size() + 3, std::byte{0xEE});
  const size_t a = 100001, b = (1u << 20) + 3;
  const std::span<std::byte> dst[] = {{out.data() + 1, a}, {out.data() + 1 + a, b},
                                      {out.data() + 1 + a + b, p.size() - a - b}};
  ReadOp ops[] = {{IdOf(1), dst, Status::OK()}};
  (*t)->GetMany(ops);
  ASSERT_TRUE(ops[0].status.ok()) << ops[0].status.ToString();
  EXPECT_TRUE(std::equal(p.begin(), p.end(), out.begin() + 1));
  EXPECT_EQ(out[0], std::byte{0xEE});
  EXPECT_EQ(out[p.size() + 1], std::byte{0xEE});
  ASSERT_TRUE(internal::CorruptMemChunkForTesting(**t, IdOf(2)).ok());
  ReadOp bad[] = {{IdOf(2), dst, Status::OK()}};
  (*t)->GetMany(bad);
  EXPECT_TRUE(bad[0].status.IsCorruption()) << bad[0].status.ToString();
  EXPECT_TRUE(std::all_of(out.begin() + 1, out.begin() + 1 + p.size(), [](std::byte x) { return x == std::byte{0}; }));
}

// Resident memory of this process in KiB (VmRSS of /proc/self/status).
uint64_t ResidentKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

TEST(MemTier, PopulateCommitsTheArenaAtOpenAndTheDefaultDoesNot) {
  // Issue 40: populate=1 commits and maps the whole arena at open, so no first touch faults on the
  // data path; without it a mem:// tier costs only the memory it holds. 64 MiB against margins of
  // 32 MiB either way: what else this process allocates meanwhile is far below that.
  constexpr uint64_t kArenaKb = 64u << 10;
  {
    const uint64_t before = ResidentKb();
    auto lazy = OpenTier("mem://?capacity=64MiB", {});
    ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
    EXPECT_LT(ResidentKb(), before + kArenaKb / 2) << "the default committed the arena at open";
  }
  const uint64_t before = ResidentKb();
  auto populated = OpenTier("mem://?capacity=64MiB&populate=1", {});
  ASSERT_TRUE(populated.ok()) << populated.status().ToString();
  EXPECT_GE(ResidentKb(), before + kArenaKb / 2) << "populate=1 left the arena uncommitted";
  EXPECT_FALSE(OpenTier("mem://?capacity=64MiB&populate=maybe", {}).ok());
}

}  // namespace
}  // namespace kvtier
