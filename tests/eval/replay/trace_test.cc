#include "eval/replay/trace.h"

#include <gtest/gtest.h>

#include <fstream>

#include "eval/replay/replay_test_util.h"
#include "eval/replay/trace_stats.h"

namespace kvtier::internal {
namespace {

TEST(ReplayTraceTest, ParsesOneLine) {
  auto r = ParseTraceLine(
      R"({"timestamp": 40, "input_length": 1025, "output_length": 3, "hash_ids": [7, 8, 9]})", 512);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->timestamp_ms, 40u);
  EXPECT_EQ(r->input_length, 1025u);
  EXPECT_EQ(r->output_length, 3u);
  EXPECT_EQ(r->hash_ids, (std::vector<uint32_t>{7, 8, 9}));
}

TEST(ReplayTraceTest, RejectsMalformedLines) {
  const char* bad[] = {
      "not json",
      R"([1, 2])",
      R"({"input_length": 10, "output_length": 1, "hash_ids": [1]})",
      R"({"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [1]})",
      R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [-3]})",
      R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": 5})",
      // 1025 tokens need 3 blocks of 512
      R"({"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]})",
      R"({"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]})",
  };
  for (const char* line : bad) {
    auto r = ParseTraceLine(line, 512);
    EXPECT_FALSE(r.ok()) << line;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << line;
    }
  }
}

TEST(ReplayTraceTest, LoadsTheCommittedPrefixOfTheSharedTrace) {
  auto t = LoadTrace(testing::First500Path(), 512);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 500u);
  EXPECT_EQ(t->requests.front().input_length, 40160u);
  EXPECT_EQ(t->requests.front().hash_ids.size(), 79u);
  EXPECT_EQ(t->input_tokens, 6403130u);  // python3: sum of input_length over the 500 lines
  EXPECT_EQ(t->block_refs, 12833u);
  EXPECT_EQ(t->DurationMs(), 139272u);

  auto first10 = LoadTrace(testing::First500Path(), 512, 10);
  ASSERT_TRUE(first10.ok());
  EXPECT_EQ(first10->requests.size(), 10u);
}

// The memory bound on block references is checked while streaming, at the line that crosses it.
TEST(ReplayTraceTest, RefusesATraceAboveItsBlockReferenceBound) {
  auto all = LoadTrace(testing::First500Path(), 512, 0, 12833);  // exactly its 12,833 references
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->block_refs, 12833u);
  auto over = LoadTrace(testing::First500Path(), 512, 0, 12832);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kInvalidArgument);
  EXPECT_NE(over.status().message().find(":500: the trace holds more than 12832 block references"),
            std::string::npos) << over.status().ToString();
  EXPECT_NE(over.status().message().find("--max-requests 499"), std::string::npos) << over.status().ToString();
  // The first 10 requests fit under a bound the whole trace exceeds: only what is kept counts.
  auto first10 = LoadTrace(testing::First500Path(), 512, 10, 1000);
  ASSERT_TRUE(first10.ok()) << first10.status().ToString();
  EXPECT_EQ(first10->requests.size(), 10u);
  EXPECT_EQ(kMaxTraceBlockRefs, uint64_t{1} << 22);  // docs/replay.md states this figure
}

TEST(ReplayTraceTest, ReportsTheLineOfABadRecordAndMissingFiles) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/t.jsonl";
  {
    std::ofstream out(path);
    out << R"({"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": [1]})"
        << "\n\n";
    out << R"({"timestamp": 4, "input_length": 1, "output_length": 1, "hash_ids": [2]})"
        << "\n";
  }
  auto t = LoadTrace(path, 512);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(":3:"), std::string::npos) << t.status().ToString();
  EXPECT_FALSE(LoadTrace(dir.path() + "/missing.jsonl", 512).ok());
}

TEST(ReplayTraceStatsTest, CountsOnlyLeadingCachedBlocks) {
  Trace t;
  t.block_tokens = 4;
  // Request 2 shares block 1 but not block 0: no prefix, no hit. Request 3 repeats request 1 whole
  // and its partial last block counts only its own 2 tokens.
  t.requests = {{0, 10, 1, {1, 2, 3}}, {1000, 8, 1, {9, 2}}, {3000, 10, 1, {1, 2, 3}}};
  for (const auto& r : t.requests) t.input_tokens += r.input_length;
  const TraceSummary s = SummarizeTrace(t);
  EXPECT_EQ(s.unique_blocks, 4u);
  EXPECT_EQ(s.unlimited_hit_blocks, 3u);
  EXPECT_EQ(s.unlimited_hit_tokens, 10u);
  EXPECT_EQ(s.input_tokens, 28u);
  EXPECT_EQ(s.duration_ms, 3000u);
  EXPECT_EQ(HitTokens(t.requests[0], 2, 4), 8u);
  EXPECT_EQ(HitTokens(t.requests[0], 3, 4), 10u);
}

}  // namespace
}  // namespace kvtier::internal
