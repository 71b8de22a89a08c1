#include "eval/replay/replayer.h"

#include <gtest/gtest.h>

#include <list>
#include <unordered_map>

#include "eval/replay/replay_test_util.h"
#include "eval/replay/trace_stats.h"

namespace kvtier::internal {
namespace {

constexpr uint32_t kBlock = 512;

ReplayScale ReplayerScale() { return ReplayScale{kBlock, 2, 131072}; }

// The reference: an LRU over hash ids, written from the replay's contract alone. A request loads
// its leading cached blocks (each becomes most recent, in order), then saves every later block
// (inserted as most recent, or made most recent when already held), evicting the least recent when
// full.
struct ReferenceLru {
  explicit ReferenceLru(size_t capacity) : capacity(capacity) {}

  bool Has(uint32_t id) const { return where.count(id) > 0; }
  void Touch(uint32_t id) { order.splice(order.begin(), order, where.at(id)); }
  void Put(uint32_t id) {
    if (Has(id)) return Touch(id);
    if (order.size() == capacity) {
      where.erase(order.back());
      order.pop_back();
      ++evictions;
    }
    order.push_front(id);
    where[id] = order.begin();
    ++inserts;
  }

  size_t capacity;
  std::list<uint32_t> order;  // front: most recent
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> where;
  uint64_t evictions = 0, inserts = 0;
};

std::vector<uint32_t> ReferenceHits(const Trace& trace, ReferenceLru& lru) {
  std::vector<uint32_t> hits;
  for (const TraceRequest& r : trace.requests) {
    size_t k = 0;
    while (k < r.hash_ids.size() && lru.Has(r.hash_ids[k])) ++k;
    for (size_t j = 0; j < k; ++j) lru.Touch(r.hash_ids[j]);
    for (size_t j = k; j < r.hash_ids.size(); ++j) lru.Put(r.hash_ids[j]);
    hits.push_back(static_cast<uint32_t>(k));
  }
  return hits;
}

uint64_t TokensOf(const Trace& trace, const std::vector<uint32_t>& hits) {
  uint64_t t = 0;
  for (size_t i = 0; i < hits.size(); ++i) t += HitTokens(trace.requests[i], hits[i], kBlock);
  return t;
}

ReplayOptions OneTier(const std::string& url, uint64_t unlimited_blocks) {
  ReplayOptions opt;
  auto t = ParseReplayTier(url, ReplayerScale());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (t.ok()) opt.tiers.push_back(*t);
  opt.unlimited_blocks = unlimited_blocks;
  return opt;
}

TEST(ReplayerTest, AgreesExactlyWithAReferenceLruOnTheFirst500Requests) {
  auto trace = LoadTrace(testing::First500Path(), kBlock);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const TraceSummary summary = SummarizeTrace(*trace);
  auto replayer = Replayer::Make(*trace, ReplayerScale(), "test/model");
  ASSERT_TRUE(replayer.ok()) << replayer.status().ToString();

  // Capacities from far below the working set to above the whole footprint (11,749 blocks).
  for (uint64_t blocks : {40u, 500u, 2000u, 6000u, 20000u}) {
    SCOPED_TRACE("capacity blocks " + std::to_string(blocks));
    ReferenceLru lru(blocks);
    const std::vector<uint32_t> want = ReferenceHits(*trace, lru);
    auto run = (*replayer)->Run(OneTier(
        "mem://?policy=lru&capacity=" + std::to_string(blocks * kBlock) + "tokens", 0));
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    EXPECT_EQ(run->hit_blocks_per_request, want);
    EXPECT_EQ(run->hit_tokens, TokensOf(*trace, want));
    EXPECT_EQ(run->wrong_blocks, 0u);
    ASSERT_EQ(run->tiers.size(), 1u);
    EXPECT_EQ(run->tiers[0].stats.evictions, lru.evictions);
    EXPECT_EQ(run->tiers[0].stats.puts, lru.inserts);
    EXPECT_EQ(run->tiers[0].hit_tokens, run->hit_tokens);
    EXPECT_EQ(run->requests, 500u);
    EXPECT_EQ(run->input_tokens, summary.input_tokens);
  }
  // The capacities above do evict: the smallest loses hits that the unlimited cache keeps.
  ReferenceLru tiny(40), unlimited(1u << 30);
  EXPECT_LT(TokensOf(*trace, ReferenceHits(*trace, tiny)),
            TokensOf(*trace, ReferenceHits(*trace, unlimited)));
}

TEST(ReplayerTest, UnlimitedReplayOfTheWholePublicTraceMatchesTheHandComputation) {
  // The trace ships in traces/ (a fresh clone has it); failing, not skipping, keeps it honest.
  auto trace = LoadTrace(testing::PublicTracePath(), kBlock);
  ASSERT_TRUE(trace.ok()) << "traces/mooncake_synthetic_trace.jsonl is part of the repository: "
                          << trace.status().ToString();
  // Hand computation (python3 over the JSONL, the README's rule): walk the requests in order, count
  // each request's leading hash ids already seen, hit tokens = min(k * 512, input_length).
  constexpr uint64_t kRequests = 3993, kInputTokens = 61194628, kBlockRefs = 121877;
  constexpr uint64_t kUniqueBlocks = 43924, kHitTokens = 39852661;
  const TraceSummary s = SummarizeTrace(*trace);
  EXPECT_EQ(s.requests, kRequests);
  EXPECT_EQ(s.input_tokens, kInputTokens);
  EXPECT_EQ(s.block_refs, kBlockRefs);
  EXPECT_EQ(s.unique_blocks, kUniqueBlocks);
  EXPECT_EQ(s.unlimited_hit_tokens, kHitTokens);
  EXPECT_NEAR(s.UnlimitedHitRatio(), 0.6512444, 1e-6);

  auto replayer = Replayer::Make(*trace, ReplayerScale(), "test/model");
  ASSERT_TRUE(replayer.ok());
  auto run = (*replayer)->Run(OneTier("mem://", s.unique_blocks));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->hit_tokens, kHitTokens);
  EXPECT_EQ(run->tiers[0].stats.evictions, 0u);
  EXPECT_EQ(run->tiers[0].stats.chunks, kUniqueBlocks);
  EXPECT_EQ(run->wrong_blocks, 0u);
}

// Issue 38: policy=window (core/eviction_policy.h), run by the real mem:// tier, finds
// more than LRU where LRU is far from the optimum, never less by more than half a point, and never
// more than Belady, on the whole public trace.
TEST(ReplayerTest, WindowPolicyBeatsLruAndStaysUnderBeladyOnThePublicTrace) {
  auto trace = LoadTrace(testing::PublicTracePath(), kBlock);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  auto replayer = Replayer::Make(*trace, ReplayerScale(), "test/model");
  ASSERT_TRUE(replayer.ok());
  for (const char* tokens : {"1000000", "4000000", "16000000"}) {  // default: lru
    SCOPED_TRACE(tokens);
    auto lru = (*replayer)->Run(OneTier(std::string("mem://?capacity=") + tokens + "tokens", 0));
    auto window =
        (*replayer)->Run(OneTier(std::string("mem://?policy=window&capacity=") + tokens + "tokens", 0));
    ASSERT_TRUE(lru.ok() && window.ok());
    const double l = lru->TokenHitRatio(), w = window->TokenHitRatio();
    const double b = window->belady.TokenHitRatio();
    EXPECT_EQ(b, lru->belady.TokenHitRatio());
    EXPECT_LE(w, b);
    EXPECT_GE(w, l - 0.005);
    if (l < 0.6 * b) {
      EXPECT_GT(w, l + 0.005);
    }
    EXPECT_EQ(window->wrong_blocks, 0u);
  }
}

// Two tiers: every hit is credited to exactly one tier. Admission governs the tiers written in the
// background (not in memory): there second-use must write less than admitting everything.
// A top tier of 300 blocks: far below the working set, so the lower tier serves hits. (A queued
// background save holds its source in the top tier, so it is never lost whatever the top tier's size.)
void CheckTwoTiers(const std::string& lower_url, bool lower_is_slow, size_t requests) {
  auto trace = LoadTrace(testing::First500Path(), kBlock, requests);
  ASSERT_TRUE(trace.ok());
  auto replayer = Replayer::Make(*trace, ReplayerScale(), "test/model");
  ASSERT_TRUE(replayer.ok());
  const std::string top = "mem://?capacity=153600tokens";
  ReplayOptions opt = OneTier(top, 0);
  auto lower = ParseReplayTier(lower_url, ReplayerScale());
  ASSERT_TRUE(lower.ok()) << lower.status().ToString();
  opt.tiers.push_back(*lower);

  std::vector<ReplayRun> runs;
  for (Admission a : {Admission::kAlways, Admission::kSecondUse}) {
    opt.admission = a;
    auto run = (*replayer)->Run(opt);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    EXPECT_EQ(run->wrong_blocks, 0u);
    EXPECT_EQ(run->store.dropped_saves, 0u);
    ASSERT_EQ(run->tiers.size(), 2u);
    EXPECT_EQ(run->tiers[0].hit_tokens + run->tiers[1].hit_tokens, run->hit_tokens);
    EXPECT_EQ(run->tiers[0].hit_blocks + run->tiers[1].hit_blocks, run->hit_blocks);
    runs.push_back(std::move(run).value());
  }
  EXPECT_GT(runs[0].tiers[1].hit_blocks, 0u) << "the lower tier should serve some hits";
  if (lower_is_slow) {
    EXPECT_LT(runs[1].tiers[1].stats.puts, runs[0].tiers[1].stats.puts);
  } else {
    EXPECT_EQ(runs[1].tiers[1].stats.puts, runs[0].tiers[1].stats.puts);
  }
  // With one tier of the top tier's size alone, fewer hits than with the lower tier behind it.
  auto alone = (*replayer)->Run(OneTier(top, 0));
  ASSERT_TRUE(alone.ok());
  EXPECT_LT(alone->hit_tokens, runs[0].hit_tokens);
}

TEST(ReplayerTest, TwoMemoryTiersCreditEachHitOnce) {
  CheckTwoTiers("mem://?capacity=4096000tokens", false, 500);
}

TEST(ReplayerTest, FileTierBehindMemoryWritesLessWithSecondUseAndCleansUp) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // Fewer requests: every file write costs a file creation and a rename.
  CheckTwoTiers("file://" + dir.path() + "?capacity=4096000tokens", true, 100);
  // Each run's directory is removed when the run ends.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(ReplayerTest, RefusesARunWithoutTiers) {
  Trace t;
  auto replayer = Replayer::Make(t, ReplayerScale(), "test/model");
  ASSERT_TRUE(replayer.ok());
  EXPECT_FALSE((*replayer)->Run(ReplayOptions{}).ok());
}

}  // namespace
}  // namespace kvtier::internal
