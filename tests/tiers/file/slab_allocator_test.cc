// The readers' bounce slab through the host-allocator hook (issue 12, pinned host memory): a
// HostAllocator given to a file:// or fs:// tier (TierOpenOptions::host_allocator) or a reader
// (ReaderOptions::host_allocator) supplies the slab's segments, and gets every one back, same pointer
// and size, when the tier closes; one that refuses leaves the reads working from heap segments.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "tiers/file/file_test_util.h"
#include "tiers/file/file_tier.h"
#include "io/chunk_io.h"
#include "io/filesystem.h"
#include "io/read_slab.h"
#include "kvtier/host_allocator.h"
#include "kvtier/tier.h"

namespace kvtier::internal {
namespace {

using kvtier::testing::KeyNo;
using kvtier::testing::PayloadFor;
using kvtier::testing::TempDir;

// Hands out aligned heap memory (or nothing, when `refuse`) and checks what comes back.
class CountingAllocator final : public HostAllocator {
 public:
  explicit CountingAllocator(bool refuse = false) : refuse_(refuse) {}
  ~CountingAllocator() override {
    for (auto& [p, size] : live_) std::free(p);
  }

  void* Allocate(size_t bytes, size_t alignment) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++asked_;
    if (alignment < 4096 || (alignment & (alignment - 1)) != 0) ++bad_alignment_;
    if (refuse_) return nullptr;
    void* p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (p != nullptr) live_.emplace(p, bytes);
    return p;
  }
  void Free(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second != bytes) {
      ++mismatched_frees_;
      return;
    }
    std::free(p);
    live_.erase(it);
    ++freed_;
  }

  uint64_t asked() const { std::lock_guard<std::mutex> l(mu_); return asked_; }
  uint64_t freed() const { std::lock_guard<std::mutex> l(mu_); return freed_; }
  uint64_t live() const { std::lock_guard<std::mutex> l(mu_); return live_.size(); }
  uint64_t mismatched_frees() const { std::lock_guard<std::mutex> l(mu_); return mismatched_frees_; }
  uint64_t bad_alignment() const { std::lock_guard<std::mutex> l(mu_); return bad_alignment_; }
  // Whether [p, p + len) lies inside one block this allocator has handed out and not had back.
  bool Owns(const std::byte* p, uint64_t len) const {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [base, size] : live_) {
      const auto* b = static_cast<const std::byte*>(base);
      if (p >= b && p + len <= b + size) return true;
    }
    return false;
  }

 private:
  const bool refuse_;
  mutable std::mutex mu_;
  std::map<void*, size_t> live_;
  uint64_t asked_ = 0, freed_ = 0, mismatched_frees_ = 0, bad_alignment_ = 0;
};

TEST(SlabAllocatorTest, SegmentsComeFromTheAllocatorAndGoBackAtDestruction) {
  auto alloc = std::make_shared<CountingAllocator>();
  {
    ReadSlab slab(8u << 20, alloc);
    auto a = slab.Allocate(1u << 20);
    auto b = slab.Allocate(5u << 20);  // past the first segment's room: a second, 6 MiB one
    ASSERT_TRUE(a && b);
    EXPECT_EQ(slab.segments(), 2u);
    EXPECT_EQ(alloc->asked(), 2u);
    EXPECT_EQ(alloc->live(), 2u);
    EXPECT_TRUE(alloc->Owns(a->data, a->len));
    EXPECT_TRUE(alloc->Owns(b->data, b->len));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 4096, 0u);
    const iovec iov = slab.SegmentIovec(1);
    EXPECT_EQ(iov.iov_base, b->data);
    EXPECT_EQ(iov.iov_len, 6u << 20);
    std::memset(a->data, 1, a->len);  // writable
    std::memset(b->data, 2, b->len);
    slab.Free(*a);
    slab.Free(*b);
    auto c = slab.Allocate(1u << 20);  // reused: nothing more asked for
    ASSERT_TRUE(c);
    EXPECT_EQ(alloc->asked(), 2u);
    slab.Free(*c);
    EXPECT_EQ(alloc->freed(), 0u);  // kept for the slab's life
  }
  EXPECT_EQ(alloc->freed(), 2u);
  EXPECT_EQ(alloc->live(), 0u);
  EXPECT_EQ(alloc->mismatched_frees(), 0u);
  EXPECT_EQ(alloc->bad_alignment(), 0u);
}

TEST(SlabAllocatorTest, ARefusingAllocatorLeavesHeapSegments) {
  auto alloc = std::make_shared<CountingAllocator>(/*refuse=*/true);
  {
    ReadSlab slab(8u << 20, alloc);
    auto a = slab.Allocate(1u << 20);
    ASSERT_TRUE(a);  // from the heap
    EXPECT_EQ(slab.segments(), 1u);
    EXPECT_EQ(alloc->asked(), 1u);
    std::memset(a->data, 3, a->len);
    slab.Free(*a);
  }
  EXPECT_EQ(alloc->freed(), 0u);  // nothing of its own came back to it
  EXPECT_EQ(alloc->mismatched_frees(), 0u);
}

// Bounce reads through a file:// tier opened by URL with the allocator: unaligned destinations with
// O_DIRECT cannot be read in place, so each chunk goes through the slab.
class FileTierSlabTest : public ::testing::Test {
 protected:
  FileTierSlabTest() : ns_(kvtier::testing::TestNamespace("tenant-a", 8192)), bytes_(ns_.layout().BytesPerChunk()) {}

  std::unique_ptr<Tier> Open(std::shared_ptr<HostAllocator> alloc) {
    auto t = OpenTier("file://" + dir_.path(), TierOpenOptions{.host_allocator = std::move(alloc)});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  ChunkId Id(uint32_t n) const { return ChunkId::Of(ns_, KeyNo(ns_, n)); }

  // Puts chunks [0, n), reads each back into a destination 512 bytes past a page; checks the bytes.
  void PutAndReadUnaligned(Tier& t, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      const auto payload = PayloadFor(KeyNo(ns_, i), bytes_);
      const std::span<const std::byte> src(payload);
      ASSERT_TRUE(t.Put(Id(i), {&src, 1}).ok());
    }
    AlignedBuffer mem = AlignedBuffer::Allocate(bytes_ + 4096);
    ASSERT_NE(mem.data(), nullptr);
    const std::span<std::byte> dst(mem.data() + 512, bytes_);
    for (uint32_t i = 0; i < n; ++i) {
      std::memset(dst.data(), 0xAB, dst.size());
      Status s = t.Get(Id(i), {&dst, 1});
      ASSERT_TRUE(s.ok()) << s.ToString();
      const auto want = PayloadFor(KeyNo(ns_, i), bytes_);
      EXPECT_EQ(std::memcmp(dst.data(), want.data(), bytes_), 0) << "chunk " << i;
    }
  }

  // The allocator is only asked when the reader bounces: io_uring with O_DIRECT.
  static bool Bounces(const Tier& t, std::string* why) {
    const std::string engine = GetFileTierReport(t).io_engine;
    *why = "reader engine " + engine + ": unaligned destinations are read in place or through heap buffers";
    return engine == "io_uring+O_DIRECT";
  }

  TempDir dir_;
  Namespace ns_;
  uint64_t bytes_;
};

TEST_F(FileTierSlabTest, SlabSegmentsComeFromTheTierAllocatorAndGoBackAtClose) {
  auto alloc = std::make_shared<CountingAllocator>();
  auto t = Open(alloc);
  ASSERT_TRUE(t);
  std::string why;
  if (!Bounces(*t, &why)) GTEST_SKIP() << why;
  PutAndReadUnaligned(*t, 4);
  const uint64_t segments = alloc->asked();
  EXPECT_GT(segments, 0u);
  EXPECT_EQ(alloc->live(), segments);
  EXPECT_EQ(alloc->freed(), 0u);
  t.reset();  // close
  EXPECT_EQ(alloc->freed(), segments);
  EXPECT_EQ(alloc->live(), 0u);
  EXPECT_EQ(alloc->mismatched_frees(), 0u);
  EXPECT_EQ(alloc->bad_alignment(), 0u);
}

TEST_F(FileTierSlabTest, ARefusingAllocatorStillReadsEveryByte) {
  auto alloc = std::make_shared<CountingAllocator>(/*refuse=*/true);
  auto t = Open(alloc);
  ASSERT_TRUE(t);
  std::string why;
  if (!Bounces(*t, &why)) GTEST_SKIP() << why;
  PutAndReadUnaligned(*t, 4);
  EXPECT_GT(alloc->asked(), 0u);  // it was asked, refused, and the heap served
  t.reset();
  EXPECT_EQ(alloc->freed(), 0u);
  EXPECT_EQ(alloc->mismatched_frees(), 0u);
}

// fs:// passes the allocator to its reader the same way (a file:// tier in the same directory tells
// whether this kernel and filesystem give the reader io_uring with O_DIRECT).
TEST_F(FileTierSlabTest, FsTierPassesTheAllocatorToItsReader) {
  {
    auto probe = Open(nullptr);
    ASSERT_TRUE(probe);
    std::string why;
    if (!Bounces(*probe, &why)) GTEST_SKIP() << why;
  }
  auto alloc = std::make_shared<CountingAllocator>();
  // direct=on: with direct=auto the read probe times both ways, and a slow (e.g. TSan) build may pick
  // buffered reads; this test is about the allocator, not the probe.
  auto t = OpenTier("fs://" + dir_.path() + "/pool?direct=on", TierOpenOptions{.host_allocator = alloc});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->capabilities().direct_io);
  PutAndReadUnaligned(**t, 2);
  const uint64_t segments = alloc->asked();
  EXPECT_GT(segments, 0u);
  t->reset();
  EXPECT_EQ(alloc->freed(), segments);
  EXPECT_EQ(alloc->live(), 0u);
  EXPECT_EQ(alloc->mismatched_frees(), 0u);
}

}  // namespace
}  // namespace kvtier::internal
