// The GPU API where there may be no GPU: every call that needs one answers NotSupported with a reason
// (never crashes), and argument checks come first, so they are testable on every machine.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "gpu/device_memory.h"
#include "gpu/host_regions.h"
#include "kvtier/gpu.h"
#include "kvtier/store.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

Layout SmallLayout() { return Layout{2, 2, 8, DType::kBF16, 64}; }

TEST(GpuApiTest, AvailabilityIsOkOrNotSupportedWithAReason) {
  Status s = GpuAvailable(0);
  if (!s.ok()) {
    EXPECT_EQ(s.code(), Code::kNotSupported) << s.ToString();
    EXPECT_FALSE(s.message().empty());
    std::printf("no usable GPU here: %s\n", s.ToString().c_str());
  }
  Status far = GpuAvailable(1 << 20);
  EXPECT_EQ(far.code(), Code::kNotSupported) << far.ToString();
  EXPECT_EQ(GpuAvailable(-1).code(), Code::kNotSupported);
}

// The hook a GPU process pins a Store's long-lived host memory with: a shm:// pool's whole mapping is
// offered (a mem:// arena, an encrypted pool or a read-only opener is not); without a GPU the
// registration answers NotSupported (the device half is gpu_pinned_test's HostRegionsArePinnedOnce).
TEST(GpuApiTest, StoreOffersItsShmMappingForPinning) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  StoreOptions opt;
  opt.tiers = {"mem://?capacity=1MiB", "shm://gpuhook?dir=" + dir.path() + "&capacity=1MiB"};
  auto store = Store::Open(opt);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto regions = internal::StoreHostRegions(**store);
  ASSERT_EQ(regions.size(), 1u) << "the shm:// mapping only";
  EXPECT_EQ(regions[0].size(), std::filesystem::file_size(dir.path() + "/kvtier-shm-gpuhook"));
  auto pins = internal::PinHostRegions(regions, 0);
  auto store_pins = PinStoreHostMemory(**store, 0);  // the public face of the same hook
  if (!GpuAvailable(0).ok()) {
    EXPECT_EQ(pins.status().code(), Code::kNotSupported) << pins.status().ToString();
    EXPECT_EQ(store_pins.status().code(), Code::kNotSupported) << store_pins.status().ToString();
    std::printf("no usable GPU here: the registration answers %s\n", pins.status().ToString().c_str());
  } else {
    EXPECT_TRUE(pins.ok()) << pins.status().ToString();
    ASSERT_TRUE(store_pins.ok()) << store_pins.status().ToString();
    EXPECT_EQ((*store_pins)->regions(), 1u);
  }
}

TEST(GpuApiTest, PinnedHostAllocatorIsNullWithoutGpu) {
  std::shared_ptr<HostAllocator> alloc = PinnedHostAllocator(0);
  if (GpuAvailable(0).ok()) {
    ASSERT_NE(alloc, nullptr);  // gpu_pinned_test checks what it gives
  } else {
    EXPECT_EQ(alloc, nullptr);
    EXPECT_EQ(internal::IsPinnedHostMemory(&alloc).status().code(), Code::kNotSupported);
  }
  EXPECT_EQ(PinnedHostAllocator(1 << 20), nullptr);  // no such device anywhere
}

TEST(GpuApiTest, PinnedRegistrationWithoutGpuIsNotSupported) {
  std::vector<std::byte> mem(1 << 16);
  auto reg = PinnedRegistration::Register(mem);
  if (GpuAvailable(0).ok()) {
    EXPECT_TRUE(reg.ok()) << reg.status().ToString();
  } else {
    EXPECT_EQ(reg.status().code(), Code::kNotSupported) << reg.status().ToString();
  }
  EXPECT_FALSE(PinnedRegistration::Register({}).ok());
}

TEST(GpuApiTest, OpenChecksTheCacheBeforeTheDevice) {
  int dummy[4];
  PagedKvCache cache;
  cache.num_blocks = 4;
  cache.block_tokens = 8;  // below 16
  cache.k = {&dummy[0], &dummy[1]};
  cache.v = {&dummy[2], &dummy[3]};
  auto t = GpuTransfer::Open(SmallLayout(), cache);
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  cache.block_tokens = 16;
  GpuTransferOptions opt;
  opt.layer_groups = 3;  // more than 2 layers
  t = GpuTransfer::Open(SmallLayout(), cache, opt);
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  opt.layer_groups = 0;
  t = GpuTransfer::Open(SmallLayout(), cache, opt);
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  opt.layer_groups = 1;
  opt.host_threads = 0;
  t = GpuTransfer::Open(SmallLayout(), cache, opt);
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  opt.host_threads = 65;
  t = GpuTransfer::Open(SmallLayout(), cache, opt);
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
}

TEST(GpuApiTest, OpenWithoutGpuIsNotSupported) {
  if (GpuAvailable(0).ok()) GTEST_SKIP() << "a GPU is present: the device tests (gpu_device_test) cover Open";
  int dummy[4];
  PagedKvCache cache;
  cache.num_blocks = 4;
  cache.block_tokens = 16;
  cache.k = {&dummy[0], &dummy[1]};
  cache.v = {&dummy[2], &dummy[3]};
  auto t = GpuTransfer::Open(SmallLayout(), cache);
  EXPECT_EQ(t.status().code(), Code::kNotSupported) << t.status().ToString();
  EXPECT_EQ(internal::DeviceAlloc(0, 4096).status().code(), Code::kNotSupported);
  EXPECT_EQ(internal::TimedHostToDevice(0, dummy, sizeof dummy, 1024).status().code(), Code::kNotSupported);
}

}  // namespace
}  // namespace kvtier
