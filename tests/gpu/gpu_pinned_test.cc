// Pinned host memory through the allocator hook (issue 12) on a real device: PinnedHostAllocator gives
// aligned, writable, page-locked memory; a mem:// arena from it round-trips a chunk and its memory is
// host-pinned to the CUDA runtime; a file:// tier's bounce slab from it still reads (O_DIRECT, io_uring)
// every byte. Each test skips with the reason when the build has no CUDA or the machine no usable GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "tiers/file/file_tier.h"
#include "gpu/device_memory.h"
#include "gpu/host_regions.h"
#include "io/chunk_io.h"
#include "kvtier/gpu.h"
#include "kvtier/store.h"
#include "kvtier/tier.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

#define SKIP_WITHOUT_GPU()                                                          \
  do {                                                                              \
    if (Status gpu_ = GpuAvailable(0); !gpu_.ok()) GTEST_SKIP() << gpu_.ToString(); \
  } while (0)

// Forwards to another allocator and remembers what it handed out.
class Recording final : public HostAllocator {
 public:
  explicit Recording(std::shared_ptr<HostAllocator> inner) : inner_(std::move(inner)) {}
  void* Allocate(size_t bytes, size_t alignment) override {
    void* p = inner_->Allocate(bytes, alignment);
    std::lock_guard<std::mutex> l(mu_);
    if (p != nullptr) blocks_.push_back(p);
    return p;
  }
  void Free(void* p, size_t bytes) override {
    inner_->Free(p, bytes);
    std::lock_guard<std::mutex> l(mu_);
    ++freed_;
  }
  std::vector<void*> blocks() const { std::lock_guard<std::mutex> l(mu_); return blocks_; }
  size_t freed() const { std::lock_guard<std::mutex> l(mu_); return freed_; }

 private:
  std::shared_ptr<HostAllocator> inner_;
  mutable std::mutex mu_;
  std::vector<void*> blocks_;
  size_t freed_ = 0;
};

Namespace TestNs(uint32_t tokens) {
  return Namespace::Make("test/pinned", Layout{2, 2, 16, DType::kFP16, tokens}, "t").value();
}

std::vector<std::byte> Pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xFF);
  return v;
}

TEST(GpuPinnedTest, AllocatorGivesAlignedWritablePinnedMemory) {
  SKIP_WITHOUT_GPU();
  auto alloc = PinnedHostAllocator(0);
  ASSERT_NE(alloc, nullptr);
  for (size_t alignment : {size_t{4096}, size_t{2} << 20, size_t{1} << 24}) {
    const size_t bytes = (size_t{1} << 20) + 1;
    void* p = alloc->Allocate(bytes, alignment);
    ASSERT_NE(p, nullptr) << alignment;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u) << alignment;
    auto* b = static_cast<unsigned char*>(p);
    b[0] = 1, b[bytes - 1] = 2;
    auto pinned = internal::IsPinnedHostMemory(b + bytes - 1);
    ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
    EXPECT_TRUE(*pinned) << alignment;
    alloc->Free(p, bytes);
  }
  EXPECT_EQ(alloc->Allocate(0, 4096), nullptr);
  EXPECT_EQ(alloc->Allocate(4096, 3000), nullptr);  // not a power of two
  std::vector<unsigned char> pageable(1 << 16);
  auto pinned = internal::IsPinnedHostMemory(pageable.data());
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_FALSE(*pinned);  // the check can say no
}

TEST(GpuPinnedTest, MemArenaFromPinnedAllocatorRoundTripsAndIsPinned) {
  SKIP_WITHOUT_GPU();
  auto rec = std::make_shared<Recording>(PinnedHostAllocator(0));
  const Namespace ns = TestNs(4096);  // 512 KiB chunks
  const uint64_t bytes = ns.layout().BytesPerChunk();
  {
    auto t = OpenTier("mem://?capacity=16MiB", TierOpenOptions{.host_allocator = rec});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_EQ(rec->blocks().size(), 1u);  // the arena
    auto pinned = internal::IsPinnedHostMemory(rec->blocks()[0]);
    ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
    EXPECT_TRUE(*pinned);
    const ChunkId id = ChunkId::Of(ns, NextChunkKey(ns, nullptr, std::vector<uint32_t>(4096, 7)));
    const auto payload = Pattern(bytes, 7);
    const std::span<const std::byte> src(payload);
    ASSERT_TRUE((*t)->Put(id, {&src, 1}).ok());
    std::vector<std::byte> out(bytes);
    const std::span<std::byte> dst(out);
    Status s = (*t)->Get(id, {&dst, 1});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out, payload);
  }
  EXPECT_EQ(rec->freed(), 1u);  // given back at close
}

TEST(GpuPinnedTest, FileSlabFromPinnedAllocatorReadsEveryByte) {
  SKIP_WITHOUT_GPU();
  auto rec = std::make_shared<Recording>(PinnedHostAllocator(0));
  kvtier::testing::TempDir dir;
  const Namespace ns = TestNs(8192);  // 1 MiB chunks
  const uint64_t bytes = ns.layout().BytesPerChunk();
  auto t = OpenTier("file://" + dir.path(), TierOpenOptions{.host_allocator = rec});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::string engine = internal::GetFileTierReport(**t).io_engine;
  if (engine != "io_uring+O_DIRECT") GTEST_SKIP() << "reader engine " << engine << ": no bounce slab in use";
  internal::AlignedBuffer mem = internal::AlignedBuffer::Allocate(bytes + 4096);
  const std::span<std::byte> dst(mem.data() + 512, bytes);  // unaligned: through the slab
  for (uint8_t i = 0; i < 3; ++i) {
    const ChunkId id = ChunkId::Of(ns, NextChunkKey(ns, nullptr, std::vector<uint32_t>(8192, i)));
    const auto payload = Pattern(bytes, i);
    const std::span<const std::byte> src(payload);
    ASSERT_TRUE((*t)->Put(id, {&src, 1}).ok());
    Status s = (*t)->Get(id, {&dst, 1});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(std::memcmp(dst.data(), payload.data(), bytes), 0) << int{i};
  }
  ASSERT_FALSE(rec->blocks().empty());  // the slab's segments came from the pinned allocator
  auto pinned = internal::IsPinnedHostMemory(rec->blocks()[0]);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_TRUE(*pinned);
  const size_t segments = rec->blocks().size();
  t->reset();
  EXPECT_EQ(rec->freed(), segments);
}

// A Store's shm:// mapping page-locked once per process: the first holder registers it, a second shares
// the registration (no second cudaHostRegister, which the driver refuses), and the last one unregisters.
TEST(GpuPinnedTest, HostRegionsArePinnedOnce) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  StoreOptions opt;
  opt.tiers = {"shm://gpupin?dir=" + dir.path() + "&capacity=8MiB"};
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto regions = internal::StoreHostRegions(**store);
  ASSERT_EQ(regions.size(), 1u);
  {
    auto first = internal::PinHostRegions(regions, 0);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    auto second = internal::PinHostRegions(regions, 0);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ((*second)->regions(), 1u);
    auto pinned = internal::IsPinnedHostMemory(regions[0].data() + regions[0].size() / 2);
    ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
    EXPECT_TRUE(*pinned);
    first->reset();
    pinned = internal::IsPinnedHostMemory(regions[0].data());
    ASSERT_TRUE(pinned.ok());
    EXPECT_TRUE(*pinned) << "still held by the second";
  }
  auto after = internal::IsPinnedHostMemory(regions[0].data());
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(*after) << "the last holder unregistered it";
}

}  // namespace
}  // namespace kvtier
