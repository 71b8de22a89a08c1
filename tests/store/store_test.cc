// Store: opening, prefix semantics of Lookup and Load, promotion, fallback to slower tiers, stats.
#include "store/store_fixture.h"

#include <thread>

namespace kvtier::testing {
namespace {

class StoreTest : public StoreTestBase {};

std::unique_ptr<Store> OpenStore(std::vector<std::unique_ptr<Tier>> tiers, StoreOptions opt = {}) {
  auto s = Store::Open(std::move(tiers), opt);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::vector<std::unique_ptr<Tier>> MemOverSlow(std::shared_ptr<Tier> lower) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem());
  tiers.push_back(std::make_unique<ForwardingTier>(std::move(lower)));
  return tiers;
}

TEST_F(StoreTest, OpenFromUrls) {
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=1MiB&page=64"};
  auto s = Store::Open(opt);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->tier_count(), 1u);
  EXPECT_TRUE((*s)->tier(0).capabilities().in_memory);
}

TEST_F(StoreTest, OpenRejectsBadOptions) {
  StoreOptions opt;
  EXPECT_EQ(Store::Open(opt).status().code(), Code::kInvalidArgument);  // no tiers
  opt.tiers = {"mem://?capacity=1MiB&colour=blue"};
  EXPECT_EQ(Store::Open(opt).status().code(), Code::kInvalidArgument);
  opt.tiers = {"nosuch://x"};
  EXPECT_EQ(Store::Open(opt).status().code(), Code::kInvalidArgument);
  opt.tiers = {"mem://?capacity=1MiB"};
  opt.background_threads = 0;
  EXPECT_EQ(Store::Open(opt).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Store::Open(std::vector<std::unique_ptr<Tier>>{}, StoreOptions{}).status().code(),
            Code::kInvalidArgument);
}

TEST_F(StoreTest, MissingMiddleChunkEndsThePrefix) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem());
  auto store = OpenStore(std::move(tiers));
  const auto keys = Keys(5);
  ASSERT_TRUE(Save(*store, std::span(keys).first(2)).ok());
  ASSERT_TRUE(Save(*store, std::span(keys).subspan(3)).ok());  // chunk 2 never saved
  EXPECT_EQ(store->Lookup(ns_, keys), 2u);
  auto n = Load(*store, keys);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(store->Lookup(ns_, std::span(keys).subspan(3)), 2u);  // they are there, just not a prefix
}

TEST_F(StoreTest, SavedChunksLoadBack) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem());
  auto store = OpenStore(std::move(tiers));
  const auto keys = Keys(8);
  ASSERT_TRUE(Save(*store, keys).ok());
  EXPECT_EQ(store->Lookup(ns_, keys), 8u);
  auto n = Load(*store, keys);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 8u);
  EXPECT_EQ(*Load(*store, Keys(3, 2)), 0u);  // another prompt
}

TEST_F(StoreTest, SizeMismatchesAreInvalidArgument) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem());
  auto store = OpenStore(std::move(tiers));
  const auto keys = Keys(2);
  std::vector<std::byte> small(bytes_ - 1), right(bytes_);
  const std::span<const std::byte> in_small[] = {small};
  const std::span<const std::byte> in_right[] = {right};
  const GatherList srcs_bad[] = {in_right, in_small};
  EXPECT_EQ(store->Save(ns_, keys, srcs_bad).code(), Code::kInvalidArgument);
  EXPECT_EQ(store->Lookup(ns_, keys), 0u);  // nothing of a rejected batch is stored
  const GatherList one[] = {in_right};
  EXPECT_EQ(store->Save(ns_, keys, one).code(), Code::kInvalidArgument);
  const std::span<std::byte> out_small[] = {std::span(small)};
  const ScatterList dsts_bad[] = {out_small};
  EXPECT_EQ(store->Load(ns_, std::span(keys).first(1), dsts_bad).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(store->Load(ns_, keys, dsts_bad).status().code(), Code::kInvalidArgument);
}

TEST_F(StoreTest, LoadFromLowerTierPromotes) {
  auto lower = OpenSharedMem();
  auto store = OpenStore(MemOverSlow(lower));
  const auto keys = Keys(3);
  for (const auto& k : keys) {  // only the slow tier has them
    const auto p = PayloadOf(k);
    const std::span<const std::byte> pieces[] = {p};
    ASSERT_TRUE(lower->Put(ChunkId::Of(ns_, k), pieces).ok());
  }
  EXPECT_EQ(store->Lookup(ns_, keys), 3u);
  EXPECT_EQ(*Load(*store, keys), 3u);
  ASSERT_TRUE(store->Flush().ok());  // promotion runs in the background, after Load returned
  for (const auto& k : keys) EXPECT_TRUE(store->tier(0).Contains(ChunkId::Of(ns_, k)));
  EXPECT_EQ(store->Stats().promotions, 3u);
  EXPECT_EQ(store->Stats().promotions_dropped, 0u);
  EXPECT_EQ(store->Stats().tiers[1].hits, 6u);  // 3 loads, then 3 read-backs by the promotion jobs
  EXPECT_EQ(*Load(*store, keys), 3u);
  EXPECT_EQ(store->Stats().tiers[1].hits, 6u);  // now served from the top tier
}

TEST_F(StoreTest, LoadMixesTiersChunkByChunk) {
  auto lower = OpenSharedMem();
  auto store = OpenStore(MemOverSlow(lower));
  const auto keys = Keys(6);
  for (size_t i = 0; i < keys.size(); ++i) {  // even chunks on top, odd ones only below
    const auto p = PayloadOf(keys[i]);
    const std::span<const std::byte> pieces[] = {p};
    Tier& t = i % 2 == 0 ? store->tier(0) : *lower;
    ASSERT_TRUE(t.Put(ChunkId::Of(ns_, keys[i]), pieces).ok());
  }
  EXPECT_EQ(*Load(*store, keys), 6u);  // bytes of each chunk checked against its key
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.tiers[0].hits, 3u);
  EXPECT_EQ(s.tiers[1].hits, 6u);  // 3 loads and 3 promotion read-backs
  EXPECT_EQ(s.promotions, 3u);
}

TEST_F(StoreTest, PromotionCanBeTurnedOff) {
  auto lower = OpenSharedMem();
  StoreOptions opt;
  opt.promote_on_load = false;
  auto store = OpenStore(MemOverSlow(lower), opt);
  const auto keys = Keys(2);
  for (const auto& k : keys) {
    const auto p = PayloadOf(k);
    const std::span<const std::byte> pieces[] = {p};
    ASSERT_TRUE(lower->Put(ChunkId::Of(ns_, k), pieces).ok());
  }
  EXPECT_EQ(*Load(*store, keys), 2u);
  EXPECT_FALSE(store->tier(0).Contains(ChunkId::Of(ns_, keys[0])));
  EXPECT_EQ(store->Stats().promotions, 0u);
}

TEST_F(StoreTest, CorruptTopCopyFallsBackToLowerTier) {
  auto lower = OpenSharedMem();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem("capacity=64KiB&page=64&verify=true"));
  tiers.push_back(std::make_unique<ForwardingTier>(lower));
  auto store = OpenStore(std::move(tiers));
  const auto keys = Keys(3);
  ASSERT_TRUE(Save(*store, keys).ok());
  ASSERT_TRUE(store->Flush().ok());
  ASSERT_TRUE(internal::CorruptMemChunkForTesting(store->tier(0), ChunkId::Of(ns_, keys[1])).ok());
  EXPECT_EQ(*Load(*store, keys), 3u);  // chunk 1 read from the lower tier, bytes checked
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.tiers[0].corrupt, 1u);
  EXPECT_EQ(s.tiers[1].hits, 2u);  // the fallback read, then the promotion's read-back
  EXPECT_TRUE(store->tier(0).Contains(ChunkId::Of(ns_, keys[1])));  // promoted again
}

TEST_F(StoreTest, CorruptOnlyCopyEndsThePrefix) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem("capacity=64KiB&page=64&verify=true"));
  auto store = OpenStore(std::move(tiers));
  const auto keys = Keys(4);
  ASSERT_TRUE(Save(*store, keys).ok());
  ASSERT_TRUE(internal::CorruptMemChunkForTesting(store->tier(0), ChunkId::Of(ns_, keys[2])).ok());
  EXPECT_EQ(store->Lookup(ns_, keys), 4u);  // not verified yet
  EXPECT_EQ(*Load(*store, keys), 2u);
  EXPECT_EQ(store->Lookup(ns_, keys), 2u);  // the bad chunk was removed
}

TEST_F(StoreTest, StatsCountCalls) {
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem());
  auto store = OpenStore(std::move(tiers));
  const auto keys = Keys(4);
  ASSERT_TRUE(Save(*store, std::span(keys).first(3)).ok());
  EXPECT_EQ(store->Lookup(ns_, keys), 3u);
  EXPECT_EQ(*Load(*store, keys), 3u);
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.saves, 1u);
  EXPECT_EQ(s.save_chunks, 3u);
  EXPECT_EQ(s.lookups, 1u);
  EXPECT_EQ(s.lookup_chunks_hit, 3u);
  EXPECT_EQ(s.lookup_chunks_missed, 1u);
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.load_chunks, 3u);
  EXPECT_EQ(s.load_bytes, 3 * bytes_);
  EXPECT_EQ(s.load_latency.count, 1u);
  ASSERT_EQ(s.tiers.size(), 1u);
  EXPECT_EQ(s.tiers[0].chunks, 3u);
  EXPECT_EQ(s.tiers[0].hits, 3u);
  EXPECT_EQ(s.tiers[0].usage_bytes, 3 * bytes_);  // 128-byte chunks in 64-byte pages
  EXPECT_EQ(s.dropped_saves, 0u);
}

TEST_F(StoreTest, ConcurrentSavesAndLoadsReturnRightBytes) {
  auto lower = OpenSharedMem("capacity=1MiB&page=64");
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(OpenMem("capacity=4KiB&page=64"));  // 32 chunks: forces eviction and promotion
  tiers.push_back(std::make_unique<ForwardingTier>(lower));
  auto store = OpenStore(std::move(tiers));
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t round = 0; round < 30; ++round) {
        const auto keys = Keys(6, 10 + (t * 7 + round) % 9);  // prompts shared between threads
        EXPECT_TRUE(Save(*store, keys).ok());
        auto n = Load(*store, keys);  // checks bytes of every loaded chunk
        EXPECT_TRUE(n.ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.tiers[0].corrupt + s.tiers[1].corrupt, 0u);
  EXPECT_LE(s.tiers[0].usage_bytes, s.tiers[0].capacity_bytes);
  EXPECT_GT(s.load_chunks, 0u);
}

}  // namespace
}  // namespace kvtier::testing
