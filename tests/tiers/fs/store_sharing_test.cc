// The shared pool seen through the Store: mem -> file -> fs stacking. (Reuse across engine processes is
// the shared-pool suite's cross-instance test, shared_pool_suite.cc.)
#include <gtest/gtest.h>

#include "tiers/fs/fs_test_support.h"
#include "kvtier/store.h"

namespace kvtier::fstest {
namespace {

class StackedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    StoreOptions o;
    o.tiers = {"mem://?capacity=16MiB", "file://" + dir_.path() + "/nvme?capacity=64MiB",
               "fs://" + dir_.path() + "/pool"};
    o.promote_on_load = false;  // keeps each tier's hit count a plain record of where reads went
    auto s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  size_t Bytes() const { return ns_.layout().BytesPerChunk(); }
  Status PutInto(size_t tier, size_t i) {
    auto data = PayloadFor(keys_[i], Bytes());
    return store_->tier(tier).Put(ChunkId::Of(ns_, keys_[i]), OnePiece(data).src());
  }
  uint64_t Hits(size_t tier) { return store_->tier(tier).Stats().hits; }

  TempDir dir_;
  Namespace ns_ = TestNamespace();
  std::vector<ChunkKey> keys_ = TestKeys(ns_, 4, 99);
  std::unique_ptr<Store> store_;
};

TEST_F(StackedStoreTest, SavesPropagateDownToEveryTier) {
  std::vector<std::vector<std::byte>> data;
  for (const ChunkKey& k : keys_) data.push_back(PayloadFor(k, Bytes()));
  std::vector<OnePiece> pieces(data.begin(), data.end());
  std::vector<GatherList> srcs;
  for (const OnePiece& p : pieces) srcs.push_back(p.src());
  ASSERT_TRUE(store_->Save(ns_, keys_, srcs).ok());
  ASSERT_TRUE(store_->Flush().ok());
  for (size_t t = 0; t < 3; ++t) {
    for (const ChunkKey& k : keys_) EXPECT_TRUE(store_->tier(t).Contains(ChunkId::Of(ns_, k))) << "tier " << t;
  }
}

TEST_F(StackedStoreTest, EachChunkIsReadFromTheFastestTierHoldingIt) {
  ASSERT_TRUE(PutInto(0, 0).ok());  // chunk 0: memory (and the pool)
  ASSERT_TRUE(PutInto(2, 0).ok());
  ASSERT_TRUE(PutInto(1, 1).ok());  // chunk 1: local file (and the pool)
  ASSERT_TRUE(PutInto(2, 1).ok());
  ASSERT_TRUE(PutInto(2, 2).ok());  // chunk 2: only the pool
  EXPECT_EQ(store_->Lookup(ns_, keys_), 3u);

  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(Bytes()));
  std::vector<OnePiece> pieces(out.begin(), out.end());
  std::vector<ScatterList> dsts;
  for (const OnePiece& p : pieces) dsts.push_back(p.dst());
  auto loaded = store_->Load(ns_, std::span(keys_).first(3), dsts);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(*loaded, 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out[i], PayloadFor(keys_[i], Bytes())) << i;
  EXPECT_EQ(Hits(0), 1u);
  EXPECT_EQ(Hits(1), 1u);
  EXPECT_EQ(Hits(2), 1u);  // the pool served only the chunk no faster tier had
}

}  // namespace
}  // namespace kvtier::fstest
