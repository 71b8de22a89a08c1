// The conformance suite: every tier in tier_cases.cc must pass every test here.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "tiers/conformance/tier_cases.h"
#include "kvtier/keys.h"
#include "kvtier/tier.h"
#include "support/chunk_payload.h"

namespace kvtier::testing {
namespace {

constexpr uint64_t kChunkBytes = 4000;             // deliberately not a multiple of any page size
constexpr uint64_t kCapacity = 128ull << 10;       // holds 16 to 32 chunks, depending on overhead

Namespace MakeNs(std::string_view tenant) {
  return *Namespace::Make("conformance/model", Layout{1, 1, 4, DType::kBF16, 1}, tenant);
}

ChunkId IdOf(const Namespace& ns, uint32_t i) { return TestChunkId(ns, i); }

// Bytes derived from the chunk's identity: any returned payload can be checked against it.
std::vector<std::byte> PayloadOf(const ChunkId& id, uint64_t n = kChunkBytes) { return TestPayload(id, n); }

class TierConformanceTest : public ::testing::TestWithParam<TierCase> {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier-conf-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    tier_ = OpenCase(kCapacity);
    ASSERT_NE(tier_, nullptr);
  }
  void TearDown() override {
    tier_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<Tier> OpenCase(uint64_t capacity) {
    auto t = OpenTier(GetParam().url(dir_, capacity));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  Status Put(Tier& tier, const ChunkId& id, uint64_t n = kChunkBytes) {
    const auto p = PayloadOf(id, n);
    const std::span<const std::byte> pieces[] = {p};
    return tier.Put(id, pieces);
  }

  // Reads into two pieces (so scatter is exercised) and checks the bytes when the read succeeds.
  Status GetChecked(Tier& tier, const ChunkId& id, uint64_t n = kChunkBytes) {
    std::vector<std::byte> out(n, std::byte{0xEE});
    const std::span<std::byte> pieces[] = {std::span(out).first(n / 3), std::span(out).subspan(n / 3)};
    Status s = tier.Get(id, pieces);
    if (s.ok()) {
      EXPECT_TRUE(out == PayloadOf(id, n)) << "wrong bytes for " << id.key.Hex();
    }
    return s;
  }

  std::string dir_;
  std::unique_ptr<Tier> tier_;
  Namespace ns_ = MakeNs("tenant-a");
};

TEST_P(TierConformanceTest, PutThenGetReturnsTheBytes) {
  const ChunkId id = IdOf(ns_, 1);
  EXPECT_FALSE(tier_->Contains(id));
  ASSERT_TRUE(Put(*tier_, id).ok());
  EXPECT_TRUE(tier_->Contains(id));
  EXPECT_TRUE(GetChecked(*tier_, id).ok());
  EXPECT_TRUE(GetChecked(*tier_, id).ok());  // a read does not consume the chunk
}

TEST_P(TierConformanceTest, GatheredPutEqualsContiguous) {
  const ChunkId id = IdOf(ns_, 2);
  const auto p = PayloadOf(id);
  const std::span<const std::byte> all(p);
  const std::span<const std::byte> pieces[] = {all.first(1), all.subspan(1, 0), all.subspan(1, 999),
                                               all.subspan(1000)};
  ASSERT_TRUE(tier_->Put(id, pieces).ok());
  EXPECT_TRUE(GetChecked(*tier_, id).ok());
}

TEST_P(TierConformanceTest, MissIsNotFound) {
  EXPECT_TRUE(GetChecked(*tier_, IdOf(ns_, 3)).IsNotFound());
  const TierStats s = tier_->Stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
}

TEST_P(TierConformanceTest, WrongDestinationSizeIsInvalidArgument) {
  const ChunkId id = IdOf(ns_, 4);
  ASSERT_TRUE(Put(*tier_, id).ok());
  std::vector<std::byte> small(kChunkBytes - 1);
  const std::span<std::byte> pieces[] = {small};
  EXPECT_EQ(tier_->Get(id, pieces).code(), Code::kInvalidArgument);
  EXPECT_TRUE(GetChecked(*tier_, id).ok());  // still intact
}

TEST_P(TierConformanceTest, NamespacesDoNotShareChunks) {
  const Namespace other = MakeNs("tenant-b");
  const ChunkId mine = IdOf(ns_, 5);
  ChunkId theirs = mine;
  theirs.ns = other.id();  // same key bytes, another namespace
  ASSERT_TRUE(Put(*tier_, mine).ok());
  EXPECT_FALSE(tier_->Contains(theirs));
  EXPECT_TRUE(GetChecked(*tier_, theirs).IsNotFound());
}

TEST_P(TierConformanceTest, PutTwiceKeepsOneCopy) {
  const ChunkId id = IdOf(ns_, 6);
  ASSERT_TRUE(Put(*tier_, id).ok());
  const uint64_t usage = tier_->Stats().usage_bytes;
  ASSERT_TRUE(Put(*tier_, id).ok());
  EXPECT_EQ(tier_->Stats().chunks, 1u);
  EXPECT_EQ(tier_->Stats().usage_bytes, usage);
  EXPECT_TRUE(GetChecked(*tier_, id).ok());
}

TEST_P(TierConformanceTest, RemoveMakesItInvisible) {
  const ChunkId id = IdOf(ns_, 7);
  ASSERT_TRUE(Put(*tier_, id).ok());
  ASSERT_TRUE(tier_->Remove(id).ok());
  EXPECT_FALSE(tier_->Contains(id));
  EXPECT_TRUE(GetChecked(*tier_, id).IsNotFound());
  EXPECT_TRUE(tier_->Remove(id).ok());  // removing an absent chunk is fine
  EXPECT_EQ(tier_->Stats().chunks, 0u);
  EXPECT_EQ(tier_->Stats().usage_bytes, 0u);
}

TEST_P(TierConformanceTest, ListAndCheckSeeEveryChunk) {
  std::set<std::string> want;
  for (uint32_t i = 10; i < 15; ++i) {
    ASSERT_TRUE(Put(*tier_, IdOf(ns_, i)).ok());
    want.insert(IdOf(ns_, i).key.Hex());
  }
  std::set<std::string> got;
  std::vector<ChunkInfo> infos;
  ASSERT_TRUE(tier_->List([&](const ChunkInfo& info) {
                       got.insert(info.id.key.Hex());
                       infos.push_back(info);
                       EXPECT_EQ(info.id.ns, ns_.id());
                       EXPECT_GE(info.stored_bytes, kChunkBytes);
                       return true;
                     }).ok());
  EXPECT_EQ(got, want);
  for (const ChunkInfo& info : infos) EXPECT_TRUE(tier_->Check(info).ok());
  int seen = 0;
  ASSERT_TRUE(tier_->List([&](const ChunkInfo&) { return ++seen < 2; }).ok());
  EXPECT_EQ(seen, 2);  // stops when asked
  ASSERT_TRUE(tier_->Remove(infos[0].id).ok());
  EXPECT_TRUE(tier_->Check(infos[0]).IsNotFound());
}

TEST_P(TierConformanceTest, CapacityIsNeverExceeded) {
  for (uint32_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(Put(*tier_, IdOf(ns_, 100 + i)).ok()) << i;
    const TierStats s = tier_->Stats();
    ASSERT_LE(s.usage_bytes, s.capacity_bytes) << i;
    ASSERT_LE(s.capacity_bytes, kCapacity) << i;
    EXPECT_TRUE(tier_->Contains(IdOf(ns_, 100 + i))) << "the newest chunk must stay";
  }
  const TierStats s = tier_->Stats();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_LT(s.chunks, 100u);
  EXPECT_GT(s.chunks, 0u);
  // Whatever survived is intact.
  for (uint32_t i = 0; i < 100; ++i) {
    const Status st = GetChecked(*tier_, IdOf(ns_, 100 + i));
    EXPECT_TRUE(st.ok() || st.IsNotFound()) << st.ToString();
  }
}

TEST_P(TierConformanceTest, OversizedChunkIsNoSpaceAndInvisible) {
  const ChunkId id = IdOf(ns_, 8);
  EXPECT_EQ(Put(*tier_, id, kCapacity + 1).code(), Code::kNoSpace);
  EXPECT_FALSE(tier_->Contains(id));
  EXPECT_LE(tier_->Stats().usage_bytes, tier_->Stats().capacity_bytes);
}

TEST_P(TierConformanceTest, StatsCountTraffic) {
  const ChunkId id = IdOf(ns_, 9);
  ASSERT_TRUE(Put(*tier_, id).ok());
  ASSERT_TRUE(GetChecked(*tier_, id).ok());
  ASSERT_TRUE(GetChecked(*tier_, IdOf(ns_, 99)).IsNotFound());
  const TierStats s = tier_->Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.bytes_read, kChunkBytes);
  EXPECT_GE(s.bytes_written, kChunkBytes);
  EXPECT_EQ(s.chunks, 1u);
  EXPECT_GE(s.usage_bytes, kChunkBytes);
  EXPECT_EQ(s.get_latency.count, 2u);
  EXPECT_FALSE(s.url.empty());
}

TEST_P(TierConformanceTest, CorruptionIsDetectedAndRemoved) {
  if (!GetParam().corrupt) GTEST_SKIP() << "tier cannot be damaged from outside";
  const ChunkId id = IdOf(ns_, 20), other = IdOf(ns_, 21);
  ASSERT_TRUE(Put(*tier_, id).ok());
  ASSERT_TRUE(Put(*tier_, other).ok());
  ASSERT_TRUE(GetParam().corrupt(*tier_, dir_, id).ok());
  std::vector<std::byte> out(kChunkBytes);
  const std::span<std::byte> pieces[] = {out};
  EXPECT_TRUE(tier_->Get(id, pieces).IsCorruption());
  EXPECT_FALSE(tier_->Contains(id));
  EXPECT_TRUE(tier_->Get(id, pieces).IsNotFound());
  EXPECT_GE(tier_->Stats().corrupt, 1u);
  EXPECT_TRUE(GetChecked(*tier_, other).ok());  // neighbours are untouched
}

TEST_P(TierConformanceTest, CheckFindsCorruption) {
  if (!GetParam().corrupt) GTEST_SKIP() << "tier cannot be damaged from outside";
  const ChunkId id = IdOf(ns_, 22);
  ASSERT_TRUE(Put(*tier_, id).ok());
  ASSERT_TRUE(GetParam().corrupt(*tier_, dir_, id).ok());
  EXPECT_TRUE(tier_->Check(ChunkInfo{id, 0}).IsCorruption());
  EXPECT_FALSE(tier_->Contains(id));
  EXPECT_GE(tier_->Stats().corrupt, 1u);
}

TEST_P(TierConformanceTest, RestartKeepsChunksAndUsage) {
  if (!tier_->capabilities().persistent) GTEST_SKIP() << "tier is not persistent";
  for (uint32_t i = 0; i < 5; ++i) ASSERT_TRUE(Put(*tier_, IdOf(ns_, 30 + i)).ok());
  ASSERT_TRUE(tier_->Flush().ok());
  const uint64_t usage = tier_->Stats().usage_bytes;
  tier_.reset();
  tier_ = OpenCase(kCapacity);
  ASSERT_NE(tier_, nullptr);
  EXPECT_EQ(tier_->Stats().chunks, 5u);
  EXPECT_EQ(tier_->Stats().usage_bytes, usage);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_TRUE(GetChecked(*tier_, IdOf(ns_, 30 + i)).ok()) << i;
}

TEST_P(TierConformanceTest, RestartWithSmallerCapacityEvicts) {
  if (!tier_->capabilities().persistent) GTEST_SKIP() << "tier is not persistent";
  for (uint32_t i = 0; i < 12; ++i) ASSERT_TRUE(Put(*tier_, IdOf(ns_, 40 + i)).ok());
  ASSERT_TRUE(tier_->Flush().ok());
  tier_.reset();
  tier_ = OpenCase(kCapacity / 4);
  ASSERT_NE(tier_, nullptr);
  const TierStats s = tier_->Stats();
  EXPECT_LE(s.usage_bytes, s.capacity_bytes);
  EXPECT_LT(s.chunks, 12u);
}

TEST_P(TierConformanceTest, ConcurrentThreadsNeverSeeWrongBytes) {
  constexpr int kThreads = 4, kOps = 300;
  std::atomic<int> hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint32_t x = 12345u + t;
      for (int op = 0; op < kOps; ++op) {
        x = x * 1664525u + 1013904223u;
        const ChunkId id = IdOf(ns_, 1000 + (x >> 8) % 48);  // 48 shared chunks, more than fit
        switch ((x >> 4) % 4) {
          case 0: EXPECT_TRUE(Put(*tier_, id).ok()); break;
          case 1: (void)tier_->Remove(id); break;
          default: {
            const Status s = GetChecked(*tier_, id);
            EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
            if (s.ok()) hits.fetch_add(1);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const TierStats s = tier_->Stats();
  EXPECT_LE(s.usage_bytes, s.capacity_bytes);
  EXPECT_GT(hits.load(), 0);
  EXPECT_EQ(s.corrupt, 0u);
}

#ifdef KVTIER_CONFORMANCE_CEPH
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TierConformanceTest);  // no rows where Ceph is missing
#endif
INSTANTIATE_TEST_SUITE_P(Tiers, TierConformanceTest, ::testing::ValuesIn(TierCases()),
                         [](const ::testing::TestParamInfo<TierCase>& info) { return info.param.name; });

}  // namespace
}  // namespace kvtier::testing
