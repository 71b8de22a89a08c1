// mem:// without copies: parallel GetMany, Borrow (pinned in-place views), the HostAllocator hook,
// and Store::Borrow over them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kvtier/store.h"
#include "kvtier/tier.h"
#include "core/copy_pool.h"
#include "store/store_fixture.h"

namespace kvtier {
namespace {

ChunkId BorrowIdOf(uint32_t n) {
  ChunkId id;
  id.key.bytes[0] = static_cast<uint8_t>(n);
  id.key.bytes[1] = static_cast<uint8_t>(n >> 8);
  id.key.bytes[9] = 0x42;
  id.layout_fingerprint = 7;
  return id;
}

std::vector<std::byte> PatternOf(uint32_t n, size_t bytes) {
  std::vector<std::byte> p(bytes);
  uint32_t x = n * 2654435761u + 1;
  for (auto& b : p) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return p;
}

Status PutPattern(Tier& t, uint32_t n, size_t bytes) {
  const auto p = PatternOf(n, bytes);
  const std::span<const std::byte> pieces[] = {p};
  return t.Put(BorrowIdOf(n), pieces);
}

std::vector<std::byte> Flatten(const BorrowedChunk& b) {
  std::vector<std::byte> out;
  for (const auto& p : b.pieces()) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::unique_ptr<Tier> Open(const std::string& url, const TierOpenOptions& o = {}) {
  auto t = OpenTier(url, o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Chunks of an odd size (several 2 MiB copy slices and a ragged end), read into destinations cut into
// pieces of odd sizes, so slice and piece boundaries never line up.
void CheckParallelGetMany(const std::string& url) {
  auto tier = Open(url);
  ASSERT_NE(tier, nullptr);
  constexpr size_t kBytes = (5u << 20) + 12345;
  constexpr uint32_t kChunks = 6;
  for (uint32_t i = 0; i < kChunks; ++i) ASSERT_TRUE(PutPattern(*tier, i, kBytes).ok());
  std::vector<std::vector<std::byte>> out(kChunks + 1, std::vector<std::byte>(kBytes, std::byte{0xEE}));
  std::vector<std::vector<std::span<std::byte>>> pieces(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    size_t at = 0;
    for (size_t cut = 777 + 1000 * i; at < kBytes; cut = cut * 3 + 4099) {
      const size_t n = std::min(cut, kBytes - at);
      pieces[i].emplace_back(out[i].data() + at, n);
      at += n;
    }
  }
  std::vector<ReadOp> ops(out.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].id = BorrowIdOf(static_cast<uint32_t>(i));  // the last one was never stored
    ops[i].dst = pieces[i];
  }
  tier->GetMany(ops);
  for (uint32_t i = 0; i < kChunks; ++i) {
    ASSERT_TRUE(ops[i].status.ok()) << i << ": " << ops[i].status.ToString();
    EXPECT_TRUE(out[i] == PatternOf(i, kBytes)) << "chunk " << i << " differs";
  }
  EXPECT_TRUE(ops[kChunks].status.IsNotFound());
  EXPECT_TRUE(std::all_of(out[kChunks].begin(), out[kChunks].end(), [](std::byte b) { return b == std::byte{0xEE}; }))
      << "a miss leaves its destination untouched";
  EXPECT_EQ(tier->Stats().hits, kChunks);
  // One chunk alone is split over the threads too.
  std::vector<std::byte> one(kBytes);
  const std::span<std::byte> dst[] = {one};
  ASSERT_TRUE(tier->Get(BorrowIdOf(3), dst).ok());
  EXPECT_TRUE(one == PatternOf(3, kBytes));
}

TEST(MemParallelTest, GetManyOnFourThreadsIsByteExact) { CheckParallelGetMany("mem://?capacity=64MiB&threads=4"); }

TEST(MemParallelTest, VerifiedGetManyOnFourThreadsIsByteExact) {
  CheckParallelGetMany("mem://?capacity=64MiB&threads=4&verify=true");
}

TEST(MemParallelTest, CorruptChunkInAParallelBatchIsZeroedAndRemoved) {
  auto tier = Open("mem://?capacity=64MiB&threads=4&verify=true");
  constexpr size_t kBytes = 3u << 20;
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(PutPattern(*tier, i, kBytes).ok());
  ASSERT_TRUE(internal::CorruptMemChunkForTesting(*tier, BorrowIdOf(1)).ok());
  std::vector<std::vector<std::byte>> out(3, std::vector<std::byte>(kBytes));
  std::vector<std::span<std::byte>> spans;
  for (auto& o : out) spans.emplace_back(o);
  std::vector<ReadOp> ops(3);
  for (size_t i = 0; i < 3; ++i) ops[i] = ReadOp{BorrowIdOf(static_cast<uint32_t>(i)), {&spans[i], 1}, Status::OK()};
  tier->GetMany(ops);
  EXPECT_TRUE(ops[0].status.ok());
  EXPECT_TRUE(ops[1].status.IsCorruption());
  EXPECT_TRUE(ops[2].status.ok());
  EXPECT_TRUE(std::all_of(out[1].begin(), out[1].end(), [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_FALSE(tier->Contains(BorrowIdOf(1)));
  EXPECT_TRUE(out[2] == PatternOf(2, kBytes));
}

TEST(CopyPoolTest, RunsEveryIndexOnceOnSeveralThreads) {
  internal::CopyPool pool(3);
  // Two tasks that each wait for the other to start can only finish on two threads at once.
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::atomic<bool> met{true};
  std::vector<std::atomic<int>> runs(64);
  std::set<std::thread::id> threads;
  pool.Run(runs.size(), [&](size_t i) {
    std::unique_lock<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    if (i < 2) {
      ++started;
      cv.notify_all();
      if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return started >= 2; })) met = false;
    }
    lock.unlock();
    runs[i]++;
  });
  EXPECT_TRUE(met) << "the first two tasks never ran at the same time";
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << i;
  EXPECT_GE(threads.size(), 2u);
}

TEST(MemBorrowTest, BorrowedPagesAreNeitherEvictedNorReused) {
  // Room for exactly two chunks of 4 pages.
  auto tier = Open("mem://?capacity=32KiB&page=4KiB&threads=1");
  constexpr size_t kBytes = 16u << 10;
  ASSERT_TRUE(PutPattern(*tier, 1, kBytes).ok());
  auto b = tier->Borrow(BorrowIdOf(1));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->held());
  EXPECT_EQ(b->size(), kBytes);
  EXPECT_TRUE(Flatten(*b) == PatternOf(1, kBytes));
  ASSERT_TRUE(PutPattern(*tier, 2, kBytes).ok());
  ASSERT_TRUE(PutPattern(*tier, 3, kBytes).ok());  // evicts 2, the unpinned one, though 1 is older
  EXPECT_TRUE(tier->Contains(BorrowIdOf(1)));
  EXPECT_FALSE(tier->Contains(BorrowIdOf(2)));
  // Removed while borrowed: gone from the index, its pages kept for the borrower.
  ASSERT_TRUE(tier->Remove(BorrowIdOf(1)).ok());
  EXPECT_FALSE(tier->Contains(BorrowIdOf(1)));
  const auto other = PatternOf(99, kBytes);
  const std::span<const std::byte> pieces[] = {other};
  ASSERT_TRUE(tier->Put(BorrowIdOf(1), pieces).ok());  // a new copy under the same key, elsewhere
  EXPECT_TRUE(Flatten(*b) == PatternOf(1, kBytes)) << "borrowed bytes changed";
  EXPECT_EQ(tier->Stats().usage_bytes, 32u << 10);  // the dead copy still holds its pages
  // Every page is held (the pinned dead copy and the new one): a third chunk fits only by evicting
  // the new copy, never the borrowed pages.
  ASSERT_TRUE(PutPattern(*tier, 4, kBytes).ok());
  EXPECT_FALSE(tier->Contains(BorrowIdOf(1)));
  EXPECT_TRUE(Flatten(*b) == PatternOf(1, kBytes)) << "borrowed bytes changed";
  b->Release();
  EXPECT_FALSE(b->held());
  EXPECT_EQ(tier->Stats().usage_bytes, 16u << 10);  // released: the pages are free again
  ASSERT_TRUE(PutPattern(*tier, 5, kBytes).ok());   // and reused without evicting chunk 4
  EXPECT_TRUE(tier->Contains(BorrowIdOf(4)));
  EXPECT_TRUE(tier->Contains(BorrowIdOf(5)));
}

TEST(MemBorrowTest, EveryChunkPinnedRefusesPutsUntilReleased) {
  auto tier = Open("mem://?capacity=8KiB&page=4KiB&threads=1");
  ASSERT_TRUE(PutPattern(*tier, 1, 8192).ok());
  {
    auto b = tier->Borrow(BorrowIdOf(1));
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(PutPattern(*tier, 2, 4096).code(), Code::kNoSpace);
    BorrowedChunk moved = std::move(b).value();  // moving keeps the pin
    EXPECT_EQ(PutPattern(*tier, 2, 4096).code(), Code::kNoSpace);
  }
  EXPECT_TRUE(PutPattern(*tier, 2, 4096).ok());
}

TEST(MemBorrowTest, BorrowVerifiesAndMissesAreNotFound) {
  auto tier = Open("mem://?capacity=1MiB&page=4KiB&verify=true");
  EXPECT_TRUE(tier->Borrow(BorrowIdOf(1)).status().IsNotFound());
  ASSERT_TRUE(PutPattern(*tier, 1, 10000).ok());
  ASSERT_TRUE(internal::CorruptMemChunkForTesting(*tier, BorrowIdOf(1)).ok());
  EXPECT_TRUE(tier->Borrow(BorrowIdOf(1)).status().IsCorruption());
  EXPECT_FALSE(tier->Contains(BorrowIdOf(1)));
  EXPECT_EQ(tier->Stats().corrupt, 1u);
}

// Aligned heap memory, counted.
class CountingAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes, size_t alignment) override {
    void* p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (p != nullptr) {
      ++allocs;
      allocated += bytes;
      base = static_cast<std::byte*>(p);
      size = bytes;
    }
    return p;
  }
  void Free(void* p, size_t bytes) override {
    ++frees;
    freed += bytes;
    std::free(p);
  }
  int allocs = 0, frees = 0;
  size_t allocated = 0, freed = 0;
  std::byte* base = nullptr;
  size_t size = 0;
};

TEST(HostAllocatorTest, TheArenaLivesInTheCallersMemory) {
  auto alloc = std::make_shared<CountingAllocator>();
  {
    auto tier = Open("mem://?capacity=1MiB&page=4KiB", TierOpenOptions{.host_allocator = alloc});
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(alloc->allocs, 1);
    EXPECT_EQ(alloc->allocated, 1u << 20);
    ASSERT_TRUE(PutPattern(*tier, 1, 50000).ok());
    auto b = tier->Borrow(BorrowIdOf(1));
    ASSERT_TRUE(b.ok());
    for (const auto& p : b->pieces()) {
      EXPECT_GE(p.data(), alloc->base);
      EXPECT_LE(p.data() + p.size(), alloc->base + alloc->size);
    }
    EXPECT_TRUE(Flatten(*b) == PatternOf(1, 50000));
    EXPECT_EQ(alloc->frees, 0);
  }
  EXPECT_EQ(alloc->frees, 1);
  EXPECT_EQ(alloc->freed, 1u << 20);
}

TEST(HostAllocatorTest, StoreOptionsReachTheMemoryTierAndAFailureIsAnError) {
  auto alloc = std::make_shared<CountingAllocator>();
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=2MiB"};
  opt.host_allocator = alloc;
  {
    auto store = Store::Open(opt);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(alloc->allocs, 1);
    EXPECT_EQ(alloc->allocated, 2u << 20);
  }
  EXPECT_EQ(alloc->frees, 1);

  class NoMemory final : public HostAllocator {
   public:
    void* Allocate(size_t, size_t) override { return nullptr; }
    void Free(void*, size_t) override {}
  };
  opt.host_allocator = std::make_shared<NoMemory>();
  auto store = Store::Open(opt);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kIOError);
}

class StoreBorrowTest : public testing::StoreTestBase {};

TEST_F(StoreBorrowTest, BorrowLendsASavedChunkInPlace) {
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=1MiB&page=64"};
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok());
  const auto keys = Keys(2);
  ASSERT_TRUE(Save(**store, keys).ok());
  auto b = (*store)->Borrow(ns_, keys[1]);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(Flatten(*b) == PayloadOf(keys[1]));
  EXPECT_EQ((*store)->Stats().borrows, 1u);
  EXPECT_TRUE((*store)->Borrow(ns_, Keys(1, 7)[0]).status().IsNotFound());
}

TEST_F(StoreBorrowTest, OnlyMemoryTiersLend) {
  auto lower = testing::OpenSharedMem();
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(testing::OpenMem());
  tiers.push_back(std::make_unique<testing::ForwardingTier>(lower));  // says it is not in memory
  auto store = Store::Open(std::move(tiers), StoreOptions{});
  ASSERT_TRUE(store.ok());
  const auto key = Keys(1)[0];
  const auto p = PayloadOf(key);
  const std::span<const std::byte> pieces[] = {p};
  ASSERT_TRUE(lower->Put(ChunkId::Of(ns_, key), pieces).ok());
  EXPECT_TRUE((*store)->Borrow(ns_, key).status().IsNotFound());  // Load would copy it
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// Hold (what a Store's queued copy keeps): the chunk stays while held, and holding is no use of it: no
// hit is counted and, once released, it is evicted first again, as the least recent chunk.
TEST(MemHoldTest, KeepsAChunkUntilReleasedWithoutUsingIt) {
  for (const std::string policy : {"lru", "window"}) {
    SCOPED_TRACE(policy);
    auto t = Open("mem://?capacity=512&page=64&policy=" + policy);  // 4 chunks of 128 bytes
    ASSERT_TRUE(PutPattern(*t, 0, 128).ok());
    auto held = t->Hold(BorrowIdOf(0));
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    EXPECT_EQ(Flatten(*held), PatternOf(0, 128));
    for (uint32_t n = 1; n <= 8; ++n) ASSERT_TRUE(PutPattern(*t, n, 128).ok());
    EXPECT_TRUE(t->Contains(BorrowIdOf(0)));
    EXPECT_EQ(t->Stats().hits, 0u);
    held->Release();
    ASSERT_TRUE(PutPattern(*t, 9, 128).ok());
    EXPECT_FALSE(t->Contains(BorrowIdOf(0)));
  }
}

// With verify=1 a hold is checked as a Borrow is: a damaged chunk is Corruption, removed and counted (no
// miss: holding is not a use), never handed to a queued copy that would re-checksum it in a lower tier.
TEST(MemHoldTest, VerifiesAsABorrowDoes) {
  auto tier = Open("mem://?capacity=1MiB&page=4KiB&verify=true");
  ASSERT_TRUE(PutPattern(*tier, 1, 10000).ok());
  ASSERT_TRUE(PutPattern(*tier, 2, 10000).ok());
  auto good = tier->Hold(BorrowIdOf(2));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(Flatten(*good), PatternOf(2, 10000));
  ASSERT_TRUE(internal::CorruptMemChunkForTesting(*tier, BorrowIdOf(1)).ok());
  EXPECT_TRUE(tier->Hold(BorrowIdOf(1)).status().IsCorruption());
  EXPECT_FALSE(tier->Contains(BorrowIdOf(1)));
  EXPECT_EQ(tier->Stats().corrupt, 1u);
  EXPECT_EQ(tier->Stats().misses, 0u);
  good->Release();
  EXPECT_TRUE(tier->Hold(BorrowIdOf(2)).ok());  // the hold's share was given back
}

// Holds take at most a quarter of the tier (NoSpace past it, retryable), so Puts always find room.
TEST(MemHoldTest, HoldsAtMostAQuarterOfTheTier) {
  auto t = Open("mem://?capacity=1KiB&page=64");  // 8 chunks of 128 bytes; a quarter is 2
  for (uint32_t n = 0; n < 3; ++n) ASSERT_TRUE(PutPattern(*t, n, 128).ok());
  auto a = t->Hold(BorrowIdOf(0));
  auto b = t->Hold(BorrowIdOf(1));
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = t->Hold(BorrowIdOf(2));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().IsNoSpace() && c.status().retryable()) << c.status().ToString();
  for (uint32_t n = 3; n < 40; ++n) ASSERT_TRUE(PutPattern(*t, n, 128).ok()) << n;
  a->Release();
  EXPECT_TRUE(t->Hold(BorrowIdOf(39)).ok());  // the released share is free again
  EXPECT_EQ(t->Hold(BorrowIdOf(2)).status().code(), Code::kNotFound);  // evicted meanwhile
}

}  // namespace
}  // namespace kvtier
