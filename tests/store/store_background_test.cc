// Store: background writes to slow tiers (async, bounded, drop-on-overload), admission, prefetch.
#include <future>

#include "store/store_fixture.h"

namespace kvtier::testing {
namespace {

class StoreBackgroundTest : public StoreTestBase {
 protected:
  std::unique_ptr<Store> Open(std::unique_ptr<Tier> top, std::unique_ptr<Tier> lower,
                              StoreOptions opt = {}) {
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(std::move(top));
    tiers.push_back(std::move(lower));
    auto s = Store::Open(std::move(tiers), opt);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  bool LowerHas(Tier& lower, const ChunkKey& k) { return lower.Contains(ChunkId::Of(ns_, k)); }
  void CheckRemoveIsNotUndone(const std::string& top_options);
  // The tier holds the chunk with the bytes that were saved.
  bool LowerHoldsSaved(Tier& lower, const ChunkKey& k) {
    std::vector<std::byte> got(bytes_);
    const std::span<std::byte> dst[] = {got};
    return lower.Get(ChunkId::Of(ns_, k), dst).ok() && got == PayloadOf(k);
  }
};

// Records where the first byte of each Put's payload lay.
class PayloadAddressTier : public ForwardingTier {
 public:
  using ForwardingTier::ForwardingTier;
  Status Put(const ChunkId& id, GatherList payload) override {
    {
      internal::MutexLock lock(mu_);
      puts_.emplace_back(id.key, payload.empty() ? nullptr : payload[0].data());
    }
    return ForwardingTier::Put(id, payload);
  }
  const std::byte* FirstByteOf(const ChunkKey& key) {
    internal::MutexLock lock(mu_);
    for (const auto& [k, p] : puts_) {
      if (k == key) return p;
    }
    return nullptr;
  }

 private:
  internal::Mutex mu_;
  std::vector<std::pair<ChunkKey, const std::byte*>> puts_ GUARDED_BY(mu_);
};

TEST_F(StoreBackgroundTest, SavesReachTheLowerTierAfterFlush) {
  auto lower = OpenSharedMem();
  auto store = Open(OpenMem(), std::make_unique<ForwardingTier>(lower));
  const auto keys = Keys(4);
  ASSERT_TRUE(Save(*store, keys).ok());
  ASSERT_TRUE(store->Flush().ok());
  for (const auto& k : keys) EXPECT_TRUE(LowerHas(*lower, k));
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.queued_saves, 4u);
  EXPECT_EQ(s.dropped_saves, 0u);
  EXPECT_EQ(s.queue_bytes_now, 0u);
  // Saving again finds them present: nothing is read back or written, nothing counted.
  const uint64_t top_hits = store->Stats().tiers[0].hits;
  ASSERT_TRUE(Save(*store, keys).ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(lower->Stats().puts, 4u);
  EXPECT_EQ(store->Stats().tiers[0].hits, top_hits);
  EXPECT_EQ(store->Stats().queued_saves, 4u);
}

// A removal is never undone by a background write that began before it: a queued write of the chunk is
// dropped, a running one is waited for (the old kvtier_remove removed from the tiers only, and the queued
// write then stored the chunk again).
// Both ways a write gets its payload: copied from a top tier of 64-byte pages, lent from one of 4 KiB pages.
TEST_F(StoreBackgroundTest, RemoveIsNotUndoneByABackgroundWriteQueuedBeforeIt) {
  for (const char* top : {"capacity=64KiB&page=64", "capacity=64KiB&page=4KiB"}) {
    SCOPED_TRACE(top);
    CheckRemoveIsNotUndone(top);
  }
}

void StoreBackgroundTest::CheckRemoveIsNotUndone(const std::string& top) {
  auto lower = OpenSharedMem();
  auto blocking = std::make_unique<BlockingTier>(lower);
  BlockingTier* gate = blocking.get();
  StoreOptions opt;
  opt.background_threads = 1;
  auto store = Open(OpenMem(top), std::move(blocking), opt);
  const auto keys = Keys(2);
  ASSERT_TRUE(Save(*store, std::span(keys).first(1)).ok());
  gate->WaitForWaiter();  // the worker runs the first chunk's write, held at the gate
  ASSERT_TRUE(Save(*store, std::span(keys).last(1)).ok());  // queued behind it
  ASSERT_TRUE(store->Remove(ns_, std::span(keys).last(1)).ok());
  auto removing = std::async(std::launch::async, [&] { return store->Remove(ns_, std::span(keys).first(1)); });
  gate->Release();
  EXPECT_TRUE(removing.get().ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_FALSE(LowerHas(*lower, keys[0]));
  EXPECT_FALSE(LowerHas(*lower, keys[1]));
  EXPECT_EQ(store->Lookup(ns_, std::span(keys).first(1)), 0u);
  EXPECT_EQ(store->Lookup(ns_, std::span(keys).last(1)), 0u);
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.queued_saves, 1u);   // the first chunk's write ran (and was then removed)
  EXPECT_EQ(s.dropped_saves, 0u);  // the withdrawn one counts in neither
  EXPECT_EQ(s.queue_bytes_now, 0u);
}

TEST_F(StoreBackgroundTest, OverloadDropsAndNeverBlocksTheCaller) {
  auto lower = OpenSharedMem();
  auto blocking = std::make_unique<BlockingTier>(lower);
  BlockingTier* gate = blocking.get();
  StoreOptions opt;
  opt.save_queue_chunks = 2;
  opt.background_threads = 1;
  auto store = Open(OpenMem(), std::move(blocking), opt);
  const auto keys = Keys(10);
  // The lower tier is stalled: Save must still return. The wait is a liveness bound, not a timing
  // assertion; a Save that blocked would never become ready until the gate opens.
  auto saved = std::async(std::launch::async, [&] { return Save(*store, keys); });
  const bool returned = saved.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "Save blocked on a stalled lower tier";
  const uint64_t dropped = store->Stats().dropped_saves;
  gate->Release();
  EXPECT_TRUE(saved.get().ok());
  EXPECT_GE(dropped, 8u);  // at most 2 jobs (queued or running) at a time
  EXPECT_EQ(store->Lookup(ns_, keys), 10u);  // the top tier has everything regardless
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.queued_saves + s.dropped_saves, 10u);
  EXPECT_EQ(lower->Stats().chunks, s.queued_saves);
  EXPECT_EQ(s.tiers[1].dropped_saves, s.dropped_saves);  // one slow tier: per-tier count agrees
  EXPECT_EQ(s.tiers[0].dropped_saves, 0u);
}

TEST_F(StoreBackgroundTest, ByteBoundDropsToo) {
  auto lower = OpenSharedMem();
  auto blocking = std::make_unique<BlockingTier>(lower);
  BlockingTier* gate = blocking.get();
  StoreOptions opt;
  opt.save_queue_bytes = 3 * bytes_;
  opt.background_threads = 1;
  auto store = Open(OpenMem(), std::move(blocking), opt);
  ASSERT_TRUE(Save(*store, Keys(10)).ok());
  EXPECT_GE(store->Stats().dropped_saves, 7u);
  EXPECT_LE(store->Stats().queue_bytes_now, 3 * bytes_);
  gate->Release();
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.queued_saves + s.dropped_saves, 10u);
}

// One request with four times as many new chunks as the top tier holds, while the writer is stalled:
// every queued copy still reaches the lower tier, under either policy. The first two chunks are held in
// the top tier (a quarter of it), the rest copied at queueing; before holds, the chunks the top tier
// evicted before the writer got to them were dropped.
TEST_F(StoreBackgroundTest, QueuedSavesAreNeverLostToTheTopTiersEviction) {
  for (const std::string policy : {"lru", "window"}) {
    SCOPED_TRACE(policy);
    auto lower = OpenSharedMem();
    auto blocking = std::make_unique<BlockingTier>(lower);
    BlockingTier* gate = blocking.get();
    StoreOptions opt;
    opt.background_threads = 1;
    auto store = Open(OpenMem("capacity=" + std::to_string(8 * bytes_) + "&page=64&policy=" + policy),
                      std::move(blocking), opt);
    const auto keys = Keys(32);
    ASSERT_TRUE(Save(*store, keys).ok());
    EXPECT_EQ(store->tier(0).Stats().evictions, keys.size() - 8);
    gate->Release();
    ASSERT_TRUE(store->Flush().ok());
    for (const auto& k : keys) EXPECT_TRUE(LowerHoldsSaved(*lower, k));
    const StoreStats s = store->Stats();
    EXPECT_EQ(s.dropped_saves, 0u);
    EXPECT_EQ(s.queued_saves, keys.size());
  }
}

// The top tier holds at most a quarter of itself for queued copies, so a Save always finds room, even
// while every held chunk waits for a stalled writer.
TEST_F(StoreBackgroundTest, HeldChunksLeaveTheTopTierRoomForSaves) {
  auto lower = OpenSharedMem();
  auto blocking = std::make_unique<BlockingTier>(lower);
  BlockingTier* gate = blocking.get();
  auto store = Open(OpenMem("capacity=" + std::to_string(4 * bytes_) + "&page=64"), std::move(blocking));
  const auto keys = Keys(16);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(Save(*store, std::span(keys).subspan(i, 1)).ok()) << i;
  gate->Release();
  ASSERT_TRUE(store->Flush().ok());
  for (const auto& k : keys) EXPECT_TRUE(LowerHoldsSaved(*lower, k));
  EXPECT_EQ(store->Stats().dropped_saves, 0u);
}

TEST_F(StoreBackgroundTest, LowerWriteFailuresCountAsDropped) {
  auto store = Open(OpenMem(), std::make_unique<FailingPutTier>(OpenSharedMem()));
  ASSERT_TRUE(Save(*store, Keys(3)).ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->Stats().dropped_saves, 3u);
  EXPECT_EQ(store->Stats().queued_saves, 0u);
  EXPECT_EQ(store->Stats().tiers[1].dropped_saves, 3u);
}

TEST_F(StoreBackgroundTest, TopTierFailureIsReturnedButLowerTierStillGetsTheChunk) {
  auto lower = OpenSharedMem();
  // 64 bytes of capacity: a 128-byte chunk never fits the top tier.
  auto store = Open(OpenMem("capacity=64&page=64"), std::make_unique<ForwardingTier>(lower));
  const auto keys = Keys(1);
  EXPECT_EQ(Save(*store, keys).code(), Code::kNoSpace);
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_TRUE(LowerHas(*lower, keys[0]));  // from a staged copy
  EXPECT_EQ(*Load(*store, keys), 1u);
}

TEST_F(StoreBackgroundTest, SlowTopTierIsWrittenFromAStagedCopy) {
  auto top = OpenSharedMem();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<ForwardingTier>(top));  // not in memory: background only
  auto store = Store::Open(std::move(tiers), StoreOptions{});
  ASSERT_TRUE(store.ok());
  const auto keys = Keys(3);
  ASSERT_TRUE(Save(**store, keys).ok());
  ASSERT_TRUE((*store)->Flush().ok());
  EXPECT_EQ(top->Stats().chunks, 3u);
  EXPECT_EQ(*Load(**store, keys), 3u);
}

TEST_F(StoreBackgroundTest, SecondUseAdmission) {
  auto lower = OpenSharedMem();
  StoreOptions opt;
  opt.admission = Admission::kSecondUse;
  auto store = Open(OpenMem(), std::make_unique<ForwardingTier>(lower), opt);
  const auto a = Keys(2, 1), b = Keys(2, 2);
  ASSERT_TRUE(Save(*store, a).ok());
  ASSERT_TRUE(Save(*store, b).ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_FALSE(LowerHas(*lower, a[0]));  // used once: kept in memory only
  EXPECT_FALSE(LowerHas(*lower, b[0]));
  ASSERT_TRUE(Save(*store, a).ok());  // second save
  EXPECT_EQ(*Load(*store, b), 2u);     // second use by a load
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_TRUE(LowerHas(*lower, a[0]));
  EXPECT_TRUE(LowerHas(*lower, a[1]));
  EXPECT_TRUE(LowerHas(*lower, b[0]));
  EXPECT_TRUE(LowerHas(*lower, b[1]));
  EXPECT_EQ(store->Stats().queued_saves, 4u);
}

TEST_F(StoreBackgroundTest, PrefetchPromotesTheAvailablePrefix) {
  auto lower = OpenSharedMem();
  auto store = Open(OpenMem(), std::make_unique<ForwardingTier>(lower));
  const auto keys = Keys(5);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 3) continue;  // the prefix is 0..2
    const auto p = PayloadOf(keys[i]);
    const std::span<const std::byte> pieces[] = {p};
    ASSERT_TRUE(lower->Put(ChunkId::Of(ns_, keys[i]), pieces).ok());
  }
  store->Prefetch(ns_, keys);
  ASSERT_TRUE(store->Flush().ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(store->tier(0).Contains(ChunkId::Of(ns_, keys[i])), i < 3) << i;
  }
  EXPECT_EQ(store->Stats().promotions, 3u);
  EXPECT_EQ(store->Stats().dropped_saves, 0u);  // prefetch is not a save
  EXPECT_EQ(*Load(*store, keys), 3u);
  // 3 from prefetch; Load found those on top. It planned chunks 3 and 4 on the last tier without
  // asking it: 3 was a miss there, and 4 (past the gap, so not reported loaded) was read in vain.
  EXPECT_EQ(store->Stats().tiers[1].hits, 4u);
  EXPECT_EQ(*Load(*store, std::span(keys).first(3)), 3u);  // the Lookup prefix, as an engine loads it
  EXPECT_EQ(store->Stats().tiers[1].hits, 4u);
}

TEST_F(StoreBackgroundTest, PromotionDoesNotDelayTheLoad) {
  // The top tier's Put stalls: a Load that promoted on its own thread could not return.
  auto lower = OpenSharedMem();
  auto top = std::make_unique<BlockingTier>(OpenSharedMem(), /*in_memory=*/true);
  BlockingTier* blocking = top.get();
  auto store = Open(std::move(top), std::make_unique<ForwardingTier>(lower));
  const auto keys = Keys(3);
  for (const auto& k : keys) {
    const auto p = PayloadOf(k);
    const std::span<const std::byte> pieces[] = {p};
    ASSERT_TRUE(lower->Put(ChunkId::Of(ns_, k), pieces).ok());
  }
  auto load = std::async(std::launch::async, [&] { return Load(*store, keys); });
  const bool returned = load.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "Load waited for the promotion";
  const StoreStats during = store->Stats();
  blocking->Release();
  auto n = load.get();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3u);  // every byte checked against its key
  if (returned) {
    EXPECT_EQ(during.promotions, 0u);  // none had finished while the Put was stalled
  }
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats after = store->Stats();
  EXPECT_EQ(after.promotions, 3u);  // ... but every one happened
  for (const auto& k : keys) EXPECT_TRUE(store->tier(0).Contains(ChunkId::Of(ns_, k)));
}

TEST_F(StoreBackgroundTest, PromotionsBeyondTheQueueAreDroppedAndCounted) {
  auto lower = OpenSharedMem();
  auto top = std::make_unique<BlockingTier>(OpenSharedMem(), /*in_memory=*/true);
  BlockingTier* blocking = top.get();
  StoreOptions opt;
  opt.save_queue_chunks = 2;
  opt.background_threads = 1;
  auto store = Open(std::move(top), std::make_unique<ForwardingTier>(lower), opt);
  const auto keys = Keys(5);
  for (const auto& k : keys) {
    const auto p = PayloadOf(k);
    const std::span<const std::byte> pieces[] = {p};
    ASSERT_TRUE(lower->Put(ChunkId::Of(ns_, k), pieces).ok());
  }
  auto n = Load(*store, keys);  // returns: the stalled Puts run on the queue's one worker
  blocking->Release();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5u);
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.promotions + s.promotions_dropped, 5u);
  EXPECT_GE(s.promotions_dropped, 3u);  // at most 2 jobs queued or running at once
}

// A top tier that lends (pages on 4 KiB boundaries) and can hold the chunk within a quarter of itself
// gives the background write its own memory, no copy; where the chunk's page is more than a quarter of
// it, the write is from a copy.
TEST_F(StoreBackgroundTest, WritesFromTheChunkHeldInATopTierLargeEnough) {
  for (const uint32_t pages : {2u, 4u}) {
    SCOPED_TRACE(pages);
    auto lower = OpenSharedMem();
    auto recording = std::make_unique<PayloadAddressTier>(lower);
    PayloadAddressTier* rec = recording.get();
    auto store = Open(OpenMem("capacity=" + std::to_string(pages * 4) + "KiB&page=4KiB"), std::move(recording));
    const auto keys = Keys(1);
    ASSERT_TRUE(Save(*store, keys).ok());
    ASSERT_TRUE(store->Flush().ok());
    auto held = store->tier(0).Borrow(ChunkId::Of(ns_, keys[0]));
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    EXPECT_EQ(rec->FirstByteOf(keys[0]) == held->pieces()[0].data(), pages == 4);
    EXPECT_TRUE(LowerHoldsSaved(*lower, keys[0]));
    EXPECT_EQ(store->Stats().queued_saves, 1u);
  }
}

// A lent chunk stays pinned while its write runs; the rest of the top tier can still be evicted, so
// Saves keep finding room (a top tier of pinned chunks would refuse them with NoSpace).
TEST_F(StoreBackgroundTest, ALentChunkLeavesTheTopTierRoomForSaves) {
  auto lower = OpenSharedMem();
  auto blocking = std::make_unique<BlockingTier>(lower);
  BlockingTier* gate = blocking.get();
  StoreOptions opt;
  opt.background_threads = 1;
  auto store = Open(OpenMem("capacity=16KiB&page=4KiB"), std::move(blocking), opt);  // 4 chunks
  const auto keys = Keys(12);
  ASSERT_TRUE(Save(*store, std::span(keys).first(1)).ok());
  gate->WaitForWaiter();  // the first chunk's write runs, held at the gate
  for (size_t i = 1; i < keys.size(); ++i) EXPECT_TRUE(Save(*store, std::span(keys).subspan(i, 1)).ok()) << i;
  gate->Release();
  ASSERT_TRUE(store->Flush().ok());
  for (const auto& k : keys) EXPECT_TRUE(LowerHoldsSaved(*lower, k));
  EXPECT_EQ(store->Stats().queued_saves, keys.size());  // held or copied at queueing: none dropped
}

TEST_F(StoreBackgroundTest, DestructorDrainsTheQueue) {
  auto lower = OpenSharedMem();
  const auto keys = Keys(6);
  {
    auto store = Open(OpenMem(), std::make_unique<ForwardingTier>(lower));
    ASSERT_TRUE(Save(*store, keys).ok());
  }  // no Flush
  for (const auto& k : keys) EXPECT_TRUE(LowerHas(*lower, k));
}

}  // namespace
}  // namespace kvtier::testing
