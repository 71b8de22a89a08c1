// Chunk events (kvtier/events.h): the Store tells its observer of every chunk a tier stores, loses to
// Remove or evicts, in the order it happens, with the tier and medium; and nothing without an observer.
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "kvtier/metrics.h"
#include "store/store_fixture.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

class EventRecorder final : public ChunkObserver {
 public:
  void OnChunkEvent(const ChunkEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
  }
  // Keys of the events of `kind` in tier `tier`, in order.
  std::vector<ChunkKey> Keys(ChunkEventKind kind, uint32_t tier) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ChunkKey> out;
    for (const auto& e : events_) {
      if (e.kind == kind && e.tier == tier) out.push_back(e.key);
    }
    return out;
  }
  std::vector<ChunkEvent> All() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<ChunkEvent> events_;
};

class StoreEventsTest : public StoreTestBase {
 protected:
  std::unique_ptr<Store> Open(std::vector<std::string> urls, uint32_t background_threads = 1) {
    StoreOptions opt;
    opt.tiers = std::move(urls);
    opt.observer = recorder_;
    opt.background_threads = background_threads;
    auto s = Store::Open(opt);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // Saves the keys one call each, in order.
  void SaveEach(Store& store, std::span<const ChunkKey> keys) {
    for (const ChunkKey& k : keys) ASSERT_TRUE(Save(store, std::span(&k, 1)).ok());
  }

  std::shared_ptr<EventRecorder> recorder_ = std::make_shared<EventRecorder>();
  TempDir dir_;
};

std::vector<ChunkKey> Prefix(std::span<const ChunkKey> keys, size_t n) { return {keys.begin(), keys.begin() + n}; }

TEST_F(StoreEventsTest, MemStoresAndEvictsInOrder) {
  auto store = Open({"mem://?capacity=512&page=64"});  // four 128-byte chunks
  const auto keys = Keys(10);
  SaveEach(*store, keys);
  EXPECT_EQ(recorder_->Keys(ChunkEventKind::kStored, 0), keys);
  EXPECT_EQ(recorder_->Keys(ChunkEventKind::kEvicted, 0), Prefix(keys, 6)) << "LRU: the oldest first";
  EXPECT_EQ(store->Stats().tiers[0].evictions, 6u);
  // Each victim is told before the chunk that pushed it out is reported stored.
  const auto all = recorder_->All();
  ASSERT_EQ(all.size(), 16u);
  EXPECT_EQ(all[4].kind, ChunkEventKind::kEvicted);
  EXPECT_EQ(all[4].key, keys[0]);
  EXPECT_EQ(all[5].key, keys[4]);
  for (const auto& e : all) {
    EXPECT_EQ(e.ns, ns_.id());
    EXPECT_STREQ(e.medium, "CPU");
    EXPECT_EQ(e.tokens_per_chunk, e.kind == ChunkEventKind::kStored ? TinyLayout().tokens_per_chunk : 0u);
  }
}

TEST_F(StoreEventsTest, ResavingAHeldChunkIsNotANewEvent) {
  auto store = Open({"mem://?capacity=64KiB&page=64"});
  const auto keys = Keys(3);
  SaveEach(*store, keys);
  SaveEach(*store, keys);
  EXPECT_EQ(recorder_->All().size(), 3u);
  EXPECT_EQ(store->Stats().events, 3u);
}

TEST_F(StoreEventsTest, RemoveTellsEachTierThatHeldTheChunk) {
  ASSERT_TRUE(dir_.ok());
  auto store = Open({"mem://?capacity=64KiB&page=64", "file://" + dir_.path() + "/file"});
  const auto keys = Keys(3);
  SaveEach(*store, keys);
  ASSERT_TRUE(store->Flush().ok());
  ASSERT_TRUE(store->Remove(ns_, std::span(keys).first(1)).ok());
  ASSERT_TRUE(store->Remove(ns_, std::span(keys).first(1)).ok());  // gone already: no second event
  EXPECT_EQ(recorder_->Keys(ChunkEventKind::kRemoved, 0), Prefix(keys, 1));
  EXPECT_EQ(recorder_->Keys(ChunkEventKind::kRemoved, 1), Prefix(keys, 1));
  EXPECT_EQ(recorder_->Keys(ChunkEventKind::kStored, 1), keys) << "one background writer: in save order";
  for (const auto& e : recorder_->All()) EXPECT_STREQ(e.medium, e.tier == 0 ? "CPU" : "DISK");
}

TEST_F(StoreEventsTest, FileTierEvictionsAreTold) {
  ASSERT_TRUE(dir_.ok());
  // A 128-byte chunk takes 8 KiB on disk (header + one padded block): room for three.
  auto store = Open({"mem://?capacity=64KiB&page=64", "file://" + dir_.path() + "/file?capacity=24KiB"});
  const auto keys = Keys(8);
  SaveEach(*store, keys);
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(recorder_->Keys(ChunkEventKind::kStored, 1), keys);
  EXPECT_EQ(recorder_->Keys(ChunkEventKind::kEvicted, 1), Prefix(keys, 5));
  EXPECT_EQ(store->Stats().tiers[1].evictions, 5u);
}

TEST_F(StoreEventsTest, FsAndShmEvictionsAreTold) {
  ASSERT_TRUE(dir_.ok());
  const std::string shm = "shm://events-" + std::to_string(::getpid()) + "?dir=" + dir_.path() +
                          "&capacity=256KiB&page=4096";
  for (const std::string& url : {"fs://" + dir_.path() + "/pool?capacity=40KiB", shm}) {
    SCOPED_TRACE(url);
    recorder_ = std::make_shared<EventRecorder>();
    auto store = Open({"mem://?capacity=64KiB&page=64", url});
    const auto keys = Keys(url.starts_with("fs") ? 12 : 80);
    SaveEach(*store, keys);
    ASSERT_TRUE(store->Flush().ok());
    const auto evicted = recorder_->Keys(ChunkEventKind::kEvicted, 1);
    const uint64_t counted = store->Stats().tiers[1].evictions;
    EXPECT_GT(counted, 0u);
    EXPECT_EQ(evicted.size(), counted);
    for (const ChunkKey& k : evicted) EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end());
    EXPECT_EQ(recorder_->Keys(ChunkEventKind::kStored, 1).size(), keys.size());
  }
}

TEST_F(StoreEventsTest, NoObserverNoEventsNorMetrics) {
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=512&page=64"};
  auto store = std::move(Store::Open(opt)).value();
  SaveEach(*store, Keys(10));
  const StoreStats s = store->Stats();
  EXPECT_FALSE(s.observed);
  EXPECT_EQ(s.events, 0u);
  EXPECT_EQ(PrometheusText(s).find("kvtier_events"), std::string::npos);
  auto observed = Open({"mem://?capacity=512&page=64"});
  SaveEach(*observed, Keys(10));
  EXPECT_NE(PrometheusText(observed->Stats()).find("kvtier_events_total 16"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::testing
