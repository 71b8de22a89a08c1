#include "tiers/fs/ttl_key_set.h"

#include <gtest/gtest.h>

#include "tiers/fs/fs_test_support.h"

namespace kvtier::internal {
namespace {

using namespace std::chrono_literals;

class TtlKeySetTest : public ::testing::Test {
 protected:
  TtlKeySet::Clock clock() {
    return [this] { return now_; };
  }
  ChunkId Id(size_t i) { return ChunkId::Of(ns_, keys_[i]); }

  std::chrono::steady_clock::time_point now_{std::chrono::seconds(1000)};
  Namespace ns_ = fstest::TestNamespace();
  std::vector<ChunkKey> keys_ = fstest::TestKeys(ns_, 512);
};

TEST_F(TtlKeySetTest, RemembersUntilTtl) {
  TtlKeySet set(1000ms, 1024, clock());
  EXPECT_FALSE(set.Contains(Id(0)));
  set.Insert(Id(0));
  EXPECT_TRUE(set.Contains(Id(0)));
  EXPECT_FALSE(set.Contains(Id(1)));
  now_ += 999ms;
  EXPECT_TRUE(set.Contains(Id(0)));
  now_ += 1ms;
  EXPECT_FALSE(set.Contains(Id(0)));
}

TEST_F(TtlKeySetTest, EraseForgets) {
  TtlKeySet set(1000ms, 1024, clock());
  set.Insert(Id(3));
  set.Erase(Id(3));
  EXPECT_FALSE(set.Contains(Id(3)));
  set.Insert(Id(3));  // a stale queue entry for the key must not evict the fresh one
  EXPECT_TRUE(set.Contains(Id(3)));
}

TEST_F(TtlKeySetTest, ClearForgetsEverything) {
  TtlKeySet set(1000ms, 1024, clock());
  for (size_t i = 0; i < 64; ++i) set.Insert(Id(i));
  set.Clear();
  EXPECT_EQ(set.size(), 0u);
  for (size_t i = 0; i < 64; ++i) EXPECT_FALSE(set.Contains(Id(i))) << i;
  set.Insert(Id(5));
  EXPECT_TRUE(set.Contains(Id(5)));
}

TEST_F(TtlKeySetTest, NamespaceIsPartOfTheKey) {
  TtlKeySet set(1000ms, 1024, clock());
  ChunkId other = Id(0);
  other.ns[0] ^= 1;
  set.Insert(Id(0));
  EXPECT_FALSE(set.Contains(other));
}

TEST_F(TtlKeySetTest, StaysBounded) {
  TtlKeySet set(1000ms, 64, clock());
  for (size_t i = 0; i < keys_.size(); ++i) set.Insert(Id(i));
  EXPECT_LE(set.size(), 64u);
  EXPECT_TRUE(set.Contains(Id(keys_.size() - 1)));  // the newest survive
  size_t held = 0;
  for (size_t i = 0; i < keys_.size(); ++i) held += set.Contains(Id(i)) ? 1 : 0;
  EXPECT_LE(held, 64u);
}

TEST_F(TtlKeySetTest, ExpiredEntriesAreSwept) {
  TtlKeySet set(10ms, 4096, clock());
  for (size_t i = 0; i < 100; ++i) set.Insert(Id(i));
  now_ += 20ms;
  for (size_t i = 100; i < 200; ++i) set.Insert(Id(i));
  // Every shard saw an insert after the first hundred expired, so only fresh entries remain.
  EXPECT_LE(set.size(), 100u + 16u);
}

TEST_F(TtlKeySetTest, ZeroTtlDisables) {
  TtlKeySet set(0ms, 1024, clock());
  set.Insert(Id(0));
  EXPECT_FALSE(set.Contains(Id(0)));
  EXPECT_EQ(set.size(), 0u);
}

}  // namespace
}  // namespace kvtier::internal
