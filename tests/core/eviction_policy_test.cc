// The shared eviction policy's decisions (core/eviction_policy.h); the tiers' own tests show it at work.
#include "core/eviction_policy.h"

#include <gtest/gtest.h>

#include <string>

#include "core/sha256.h"

namespace kvtier::internal {
namespace {

ChunkKey KeyOf(uint64_t n) {
  const std::string text = "key " + std::to_string(n);
  Sha256 h;
  h.Update(text.data(), text.size());
  ChunkKey k;
  k.bytes = h.Final();
  return k;
}

TEST(EvictionPolicyTest, ParsesItsTwoNames) {
  EXPECT_EQ(*ParseEvictionPolicy("lru"), EvictionPolicy::kLru);
  EXPECT_EQ(*ParseEvictionPolicy("window"), EvictionPolicy::kWindow);
  auto bad = ParseEvictionPolicy("LRU ");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'window'"), std::string::npos);
  TierUrl url;
  EXPECT_EQ(*EvictionPolicyOf(url), EvictionPolicy::kLru);  // the default, for now (docs/replay.md)
  url.params["policy"] = "window";
  EXPECT_EQ(*EvictionPolicyOf(url), EvictionPolicy::kWindow);
}

TEST(EvictionPolicyTest, NewChunksGoToTheWindowUnlessRememberedAsEvicted) {
  EXPECT_EQ(SegmentForNewChunk(EvictionPolicy::kWindow, false), EvictionList::kWindow);
  EXPECT_EQ(SegmentForNewChunk(EvictionPolicy::kWindow, true), EvictionList::kMain);
  EXPECT_EQ(SegmentForNewChunk(EvictionPolicy::kLru, true), EvictionList::kWindow);
}

TEST(EvictionPolicyTest, EvictsTheWindowWhileItHoldsMoreThanItsShare) {
  SegmentState s{.window_used = 10, .main_used = 90, .capacity = 100, .window_tail_age = 10,
                 .main_tail_age = 100};
  EXPECT_EQ(SegmentToEvict(EvictionPolicy::kWindow, s), EvictionList::kWindow);
  EXPECT_EQ(SegmentToEvict(EvictionPolicy::kLru, s), EvictionList::kWindow);
  s.window_used = 2;  // 2% of 100: its share
  EXPECT_EQ(SegmentToEvict(EvictionPolicy::kWindow, s), EvictionList::kMain);
  s.window_used = 10;
  s.main_tail_age = 16 * 10 + 16;  // main's tail is stale: older than 16 window lifetimes
  EXPECT_EQ(SegmentToEvict(EvictionPolicy::kWindow, s), EvictionList::kMain);
  s.main_used = 0;  // nothing in main: the window, whatever its size
  EXPECT_EQ(SegmentToEvict(EvictionPolicy::kWindow, s), EvictionList::kWindow);
  s = SegmentState{.window_used = 0, .main_used = 5, .capacity = 100};
  EXPECT_EQ(SegmentToEvict(EvictionPolicy::kWindow, s), EvictionList::kMain);
}

TEST(EvictionPolicyTest, GhostRemembersRecentEvictionsAndForgetsOldOnes) {
  GhostFilter g;
  g.Init(100);  // turnover: 400 keys per filter
  for (uint64_t i = 0; i < 400; ++i) g.Add(KeyOf(i));
  for (uint64_t i = 0; i < 400; ++i) EXPECT_TRUE(g.Contains(KeyOf(i))) << i;
  for (uint64_t i = 400; i < 800; ++i) g.Add(KeyOf(i));  // the first 400 now in the older filter
  EXPECT_TRUE(g.Contains(KeyOf(0)));
  for (uint64_t i = 800; i < 1200; ++i) g.Add(KeyOf(i));  // ... and now forgotten
  int remembered = 0, false_positives = 0;
  for (uint64_t i = 0; i < 400; ++i) remembered += g.Contains(KeyOf(i));
  for (uint64_t i = 10000; i < 20000; ++i) false_positives += g.Contains(KeyOf(i));
  EXPECT_LT(remembered, 20);  // only false positives
  EXPECT_LT(false_positives, 200);  // 16 bits and 3 probes a key: about 1% of 10,000 (two filters)
  for (uint64_t i = 800; i < 1200; ++i) EXPECT_TRUE(g.Contains(KeyOf(i))) << i;
}

TEST(EvictionPolicyTest, AGhostOfNoCapacityRemembersNothing) {
  GhostFilter g;
  g.Init(0);
  g.Add(KeyOf(1));
  EXPECT_FALSE(g.Contains(KeyOf(1)));
}

}  // namespace
}  // namespace kvtier::internal
