// OrderedBatches (src/gpu/ordered_batches): batches read on several threads are consumed in order, a
// slot is never read into while its previous batch is read or consumed, and the first short or failed
// read ends the request.
#include "gpu/ordered_batches.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier::internal {
namespace {

// Records what a run did; every check is on what happened, not on timing.
struct Recorder {
  explicit Recorder(uint32_t slots) : in_use(slots) {
    for (auto& u : in_use) u = 0;
  }
  std::vector<std::atomic<int>> in_use;  // per slot: readers or consumers inside now
  std::atomic<bool> overlap{false};
  std::mutex mu;
  std::vector<size_t> read_order, consumed;
  std::vector<std::vector<size_t>> slot_content;  // chunk ids written into each slot

  void Enter(uint32_t slot) {
    if (in_use[slot].fetch_add(1) != 0) overlap = true;
  }
  void Leave(uint32_t slot) { in_use[slot].fetch_sub(1); }
};

BatchReadFn Reader(Recorder& rec, size_t short_batch = SIZE_MAX, uint32_t short_count = 0,
                   size_t failing_batch = SIZE_MAX) {
  return [&rec, short_batch, short_count, failing_batch](size_t b, uint32_t slot, size_t first,
                                                         uint32_t count) -> Result<size_t> {
    rec.Enter(slot);
    std::this_thread::yield();  // widen any window in which another thread could use the slot
    {
      std::lock_guard<std::mutex> lock(rec.mu);
      rec.read_order.push_back(b);
      rec.slot_content[slot].clear();
      for (uint32_t c = 0; c < count; ++c) rec.slot_content[slot].push_back(first + c);
    }
    rec.Leave(slot);
    if (b == failing_batch) return Status::IOError("injected read failure");
    if (b == short_batch) return size_t{short_count};
    return size_t{count};
  };
}

BatchConsumeFn Consumer(Recorder& rec, size_t failing_batch = SIZE_MAX) {
  return [&rec, failing_batch](size_t b, uint32_t slot, size_t first, uint32_t count, uint32_t loaded) -> Status {
    rec.Enter(slot);
    std::this_thread::yield();
    std::vector<size_t> want;
    for (uint32_t c = 0; c < count; ++c) want.push_back(first + c);
    std::vector<size_t> got;
    {
      std::lock_guard<std::mutex> lock(rec.mu);
      got = rec.slot_content[slot];
      rec.consumed.push_back(b);
    }
    rec.Leave(slot);
    EXPECT_EQ(got, want) << "batch " << b << " consumed another batch's slot content";
    EXPECT_GT(loaded, 0u);
    if (b == failing_batch) return Status::Internal("injected consume failure");
    return Status::OK();
  };
}

TEST(OrderedBatchesTest, ConsumesEveryBatchInOrderWithoutSlotOverlap) {
  for (unsigned threads : {1u, 3u, 8u}) {
    for (uint32_t slots : {1u, 2u, 4u, 9u}) {
      ThreadPool pool(threads);
      Recorder rec(slots);
      rec.slot_content.resize(slots);
      auto n = RunOrderedBatches(pool, BatchPlan{103, 5, slots}, Reader(rec), Consumer(rec));
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      EXPECT_EQ(*n, 103u);
      std::vector<size_t> want(21);
      for (size_t i = 0; i < want.size(); ++i) want[i] = i;
      EXPECT_EQ(rec.consumed, want) << threads << " threads, " << slots << " slots";
      EXPECT_EQ(rec.read_order.size(), 21u);
      EXPECT_FALSE(rec.overlap) << "a slot was read into while in use";
    }
  }
}

TEST(OrderedBatchesTest, AShortReadEndsThePrefix) {
  ThreadPool pool(4);
  Recorder rec(3);
  rec.slot_content.resize(3);
  // Batch 2 (chunks 8..11) loads 1 of 4: the prefix is 9 chunks; batch 3 and later are never consumed.
  auto n = RunOrderedBatches(pool, BatchPlan{40, 4, 3}, Reader(rec, 2, 1), Consumer(rec));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 9u);
  EXPECT_EQ(rec.consumed, (std::vector<size_t>{0, 1, 2}));
  EXPECT_LE(rec.read_order.size(), 5u);  // at most the batches in flight when batch 2 came back
}

TEST(OrderedBatchesTest, AnEmptyReadIsNotConsumed) {
  ThreadPool pool(2);
  Recorder rec(2);
  rec.slot_content.resize(2);
  auto n = RunOrderedBatches(pool, BatchPlan{20, 4, 2}, Reader(rec, 1, 0), Consumer(rec));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4u);
  EXPECT_EQ(rec.consumed, (std::vector<size_t>{0}));
}

TEST(OrderedBatchesTest, TheFirstErrorInBatchOrderIsReturned) {
  ThreadPool pool(4);
  Recorder rec(4);
  rec.slot_content.resize(4);
  auto n = RunOrderedBatches(pool, BatchPlan{40, 4, 4}, Reader(rec, SIZE_MAX, 0, 3), Consumer(rec));
  EXPECT_EQ(n.status().code(), Code::kIOError);
  EXPECT_EQ(rec.consumed, (std::vector<size_t>{0, 1, 2}));

  Recorder rec2(4);
  rec2.slot_content.resize(4);
  n = RunOrderedBatches(pool, BatchPlan{40, 4, 4}, Reader(rec2), Consumer(rec2, 1));
  EXPECT_EQ(n.status().code(), Code::kInternal);
  EXPECT_EQ(rec2.consumed, (std::vector<size_t>{0, 1}));
}

TEST(OrderedBatchesTest, EdgeCases) {
  ThreadPool pool(1);
  Recorder rec(1);
  rec.slot_content.resize(1);
  auto n = RunOrderedBatches(pool, BatchPlan{0, 4, 1}, Reader(rec), Consumer(rec));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_TRUE(rec.read_order.empty());
  EXPECT_FALSE(RunOrderedBatches(pool, BatchPlan{4, 0, 1}, Reader(rec), Consumer(rec)).ok());
  n = RunOrderedBatches(pool, BatchPlan{3, 8, 2}, Reader(rec), Consumer(rec));  // one partial batch
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3u);
}

}  // namespace
}  // namespace kvtier::internal
