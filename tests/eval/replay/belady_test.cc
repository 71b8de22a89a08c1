// The offline optimum (belady.h): hand-checked small cases, the public trace's figures of issue 38
// (computed independently with a Python MIN over the JSONL), and the bound over the reference LRU.
#include "eval/replay/belady.h"

#include <gtest/gtest.h>

#include <list>
#include <unordered_map>

#include "eval/replay/replay_test_util.h"
#include "eval/replay/trace_stats.h"

namespace kvtier::internal {
namespace {

// Requests of whole 512-token blocks.
Trace Blocks(std::initializer_list<std::vector<uint32_t>> requests) {
  Trace t;
  for (const auto& ids : requests) {
    TraceRequest r;
    r.hash_ids = ids;
    r.input_length = 512 * ids.size();
    t.input_tokens += r.input_length;
    t.block_refs += ids.size();
    t.requests.push_back(r);
  }
  return t;
}

TEST(BeladyTest, KeepsWhatIsNeededSoonestAndBypassesTheRest) {
  // 1 2 3 1 2 3 with room for two: LRU finds nothing; MIN keeps 1 and 2, does not keep 3 (needed
  // last), and finds 1 and 2 again.
  const Trace t = Blocks({{1}, {2}, {3}, {1}, {2}, {3}});
  const BeladyResult b = Belady(t, 2);
  EXPECT_EQ(b.hit_blocks, 2u);
  EXPECT_EQ(b.hit_tokens, 1024u);
  EXPECT_EQ(b.resident_refs, 2u);
  EXPECT_EQ(b.input_tokens, 3072u);
}

TEST(BeladyTest, CreditsOnlyLeadingBlocks) {
  // Room for one block: after [1, 2], MIN holds 2 (needed soonest) and keeps it, so [3, 2] and
  // [1, 2] each find 2 resident behind a missing head: two resident references, no prefix hit.
  const Trace t = Blocks({{1, 2}, {3, 2}, {1, 2}});
  const BeladyResult one = Belady(t, 1);
  EXPECT_EQ(one.resident_refs, 2u);
  EXPECT_EQ(one.hit_blocks, 0u);
  const BeladyResult unlimited = Belady(t, 0);
  EXPECT_EQ(unlimited.hit_blocks, 2u);  // [1, 2] again, whole
  EXPECT_EQ(unlimited.resident_refs, 3u);
}

TEST(BeladyTest, PublicTraceMatchesIssueTable) {
  auto trace = LoadTrace(testing::PublicTracePath(), 512);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  // Hit tokens from an independent Python MIN (heapq, bypass) over the JSONL, 61,194,628 input tokens.
  struct Point {
    uint64_t blocks, hit_tokens, resident_refs;
  };
  for (const Point& p : {Point{1953, 23414239, 45779}, Point{5859, 34270973, 67028},
                         Point{19531, 39852661, 77953}}) {
    const BeladyResult b = Belady(*trace, p.blocks);
    EXPECT_EQ(b.input_tokens, 61194628u);
    EXPECT_EQ(b.hit_tokens, p.hit_tokens) << p.blocks;
    EXPECT_EQ(b.resident_refs, p.resident_refs) << p.blocks;
  }
  EXPECT_EQ(Belady(*trace, 0).hit_tokens, SummarizeTrace(*trace).unlimited_hit_tokens);
}

// Plain LRU with the replay's contract, written apart from belady.cc.
uint64_t LruResidentRefs(const Trace& t, size_t capacity) {
  std::list<uint32_t> order;
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> where;
  uint64_t resident = 0;
  for (const TraceRequest& r : t.requests) {
    for (uint32_t id : r.hash_ids) {
      auto it = where.find(id);
      if (it != where.end()) {
        ++resident;
        order.splice(order.begin(), order, it->second);
        continue;
      }
      if (order.size() == capacity) {
        where.erase(order.back());
        order.pop_back();
      }
      order.push_front(id);
      where[id] = order.begin();
    }
  }
  return resident;
}

TEST(BeladyTest, FindsAtLeastAsManyResidentBlocksAsLru) {
  auto trace = LoadTrace(testing::First500Path(), 512);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  uint64_t last = 0;
  for (size_t cap : {1, 10, 40, 200, 1000, 5000}) {
    const BeladyResult b = Belady(*trace, cap);
    EXPECT_GE(b.resident_refs, LruResidentRefs(*trace, cap)) << cap;
    EXPECT_GE(b.resident_refs, last) << cap;  // more room never finds less
    last = b.resident_refs;
  }
}

}  // namespace
}  // namespace kvtier::internal
