#include "eval/replay/replay_tier.h"

#include <gtest/gtest.h>

#include "core/chunk_format.h"

namespace kvtier::internal {
namespace {

ReplayScale Scale() {
  // 128 KiB of KV per token, like an 8B model with 32 layers x 8 KV heads x 128 dims in bf16.
  return ReplayScale{512, 2, 131072};
}

TEST(ReplayTierTest, ParsesTokenCounts) {
  EXPECT_EQ(*ParseTokenCount("1000000"), 1000000u);
  EXPECT_EQ(*ParseTokenCount("250k"), 250000u);
  EXPECT_EQ(*ParseTokenCount("1.5M"), 1500000u);
  EXPECT_EQ(*ParseTokenCount("2G"), 2000000000u);
  EXPECT_FALSE(ParseTokenCount("").ok());
  EXPECT_FALSE(ParseTokenCount("M").ok());
  EXPECT_FALSE(ParseTokenCount("12x").ok());
  EXPECT_FALSE(ParseTokenCount("-5").ok());
}

TEST(ReplayTierTest, TokenCapacityBecomesScaledBytesOfWholeBlocks) {
  auto t = ParseReplayTier("mem://?capacity=1000000tokens", Scale());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->unlimited);
  EXPECT_EQ(t->capacity_blocks, 1000000u / 512);  // 1953 whole blocks
  EXPECT_EQ(t->stored_block_bytes, 1024u);        // one page per block
  auto url = TierUrl::Parse(t->OpenUrl(0, ""));
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->params.at("capacity"), std::to_string(1953 * 1024));
  EXPECT_EQ(url->params.at("page"), "1024");
}

TEST(ReplayTierTest, ByteCapacityMeansBytesOfTheModel) {
  // 1 GiB of 128 KiB/token KV holds 8192 tokens = 16 blocks.
  auto t = ParseReplayTier("mem://?capacity=1GiB", Scale());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->capacity_blocks, 16u);
}

TEST(ReplayTierTest, NoCapacityIsUnlimitedAndSizedToTheTrace) {
  auto t = ParseReplayTier("mem://", Scale());
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->unlimited);
  auto url = TierUrl::Parse(t->OpenUrl(5000, ""));
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->params.at("capacity"), std::to_string(5000 * 1024));
}

TEST(ReplayTierTest, FileTiersCountTheChunkHeader) {
  auto t = ParseReplayTier("file:///some/dir?capacity=5120tokens", Scale());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->UsesPath());
  EXPECT_EQ(t->capacity_blocks, 10u);
  EXPECT_EQ(t->stored_block_bytes, StoredChunkBytes(1024));
  auto url = TierUrl::Parse(t->OpenUrl(0, "/tmp/run1"));
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->path, "/tmp/run1");
  EXPECT_EQ(url->params.at("capacity"), std::to_string(10 * StoredChunkBytes(1024)));
}

TEST(ReplayTierTest, RejectsCapacitiesBelowOneBlockAndBadScales) {
  EXPECT_FALSE(ParseReplayTier("mem://?capacity=100tokens", Scale()).ok());
  EXPECT_FALSE(ParseReplayTier("mem://?capacity=lots", Scale()).ok());
  EXPECT_FALSE(ParseReplayTier("mem://?capacity=0tokens", Scale()).ok());
  EXPECT_FALSE(ParseReplayTier("nonsense", Scale()).ok());
  EXPECT_FALSE(ParseReplayTier("mem://", ReplayScale{512, 3, 131072}).ok());
  EXPECT_FALSE(ParseReplayTier("mem://", ReplayScale{0, 2, 131072}).ok());
  auto t = ParseReplayTier("mem://", Scale());
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(WithCapacityTokens(*t, 511, Scale()).ok());
  auto c = WithCapacityTokens(*t, 1024, Scale());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->capacity_blocks, 2u);
  EXPECT_FALSE(c->unlimited);
}

TEST(ReplayTierTest, ReplayLayoutChunkIsOneScaledBlock) {
  const Layout l = Scale().ReplayLayout();
  ASSERT_TRUE(l.Validate().ok());
  EXPECT_EQ(l.BytesPerChunk(), 1024u);
  EXPECT_EQ(l.tokens_per_chunk, 512u);
}

}  // namespace
}  // namespace kvtier::internal
