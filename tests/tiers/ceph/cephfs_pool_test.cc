// The shared fs:// pool across two CephFS mounts of one cluster (two ceph-fuse clients: two "hosts"),
// started once for this binary: the shared-pool suite of tests/tiers/fs (shared_pool_suite.cc: cross-instance,
// readers/writers/gc on both mounts, crash cycles, racing publications) with path A = mount A and path
// B = mount B, and the read-mode probe on each mount. The workers are tests/tiers/fs's fs_pool_worker.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "tiers/ceph/ceph_harness.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_layout.h"
#include "tiers/fs/pool_pair.h"
#include "tiers/fs/read_probe.h"

namespace kvtier::ceph_testing {
namespace {

LocalCeph* g_fs = nullptr;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new ClusterEnvironment("--no-rgw", &g_fs));

// The same directory seen through each mount; an empty pair (a failure in SetUp) when the cluster did
// not start.
fstest::PoolPairSource CephFsPoolPairs() {
  fstest::PoolPairSource src;
  src.name = "CephFs";
  src.make = [](const std::string& test) {
    fstest::PoolPair p;
    p.skip = SkipReason();
    if (!p.skip.empty() || g_fs == nullptr || g_fs->fs_mounts().size() != 2) return p;
    p.a = g_fs->fs_mounts()[0] + "/" + test + "/pool";
    p.b = g_fs->fs_mounts()[1] + "/" + test + "/pool";
    p.scratch = g_fs->dir() + "/" + test;
    return p;
  };
  // Every metadata call is a FUSE request to an MDS on a shared 2-core machine: smaller runs.
  src.ops_per_worker = 300;
  src.prompt_chunks = 48;
  src.crash_cycles = 4;
  src.crash_run_ms = 150;  // a put through FUSE takes milliseconds: let each victim save a dozen or more
  src.race_chunks = 50;
  return src;
}

// Each mount gets its own read mode: a writable open probes it (a probe file in the pool's root,
// removed again), the choice follows the probe's rule, and a read-only open through the same mount
// in this process reuses the answer and writes nothing. Which mode wins is the probe's measurement,
// printed for docs/distributed.md, not asserted.
TEST(CephFsReadMode, EachMountIsProbedAndReadOnlyOpensWriteNothing) {
  if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
  ASSERT_NE(g_fs, nullptr) << "the cluster did not start (see above)";
  ASSERT_EQ(g_fs->fs_mounts().size(), 2u);
  for (const std::string& mount : g_fs->fs_mounts()) {
    const std::string root = mount + "/read-mode/pool";
    auto tier = internal::OpenFsTier(*TierUrl::Parse("fs://" + root));
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    const std::string mode = (*tier)->Stats().read_mode;
    std::cout << "[cephfs] " << mount << ": read_mode " << mode << "\n";
    auto pool = internal::OpenPool(root, internal::ChunkDirOptions{});
    ASSERT_TRUE(pool.ok());
    const internal::ReadModeChoice c = internal::ChooseReadMode(**pool, internal::ReadProbeOptions{.use_cache = false});
    std::cout << "[cephfs] " << mount << ": probed again: " << internal::DescribeReadMode(c) << "\n";
    EXPECT_GT(c.buffered_gbps, 0) << c.reason;
    if (c.direct_gbps > 0) {
      EXPECT_EQ(c.direct, internal::KeepDirect(c.direct_gbps, c.buffered_gbps)) << c.reason;
    }
    EXPECT_EQ((*tier)->capabilities().direct_io, mode.rfind("O_DIRECT", 0) == 0) << mode;
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(root)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"KVTIER_POOL", "v1"})) << "the probe left a file";
    auto ro = internal::OpenFsTier(*TierUrl::Parse("fs://" + root), TierOpenOptions{.read_only = true});
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    EXPECT_NE((*ro)->Stats().read_mode.find("earlier probe of the same mount"), std::string::npos)
        << (*ro)->Stats().read_mode;
  }
}

}  // namespace
}  // namespace kvtier::ceph_testing

namespace kvtier::fstest {

INSTANTIATE_TEST_SUITE_P(Pool, SharedPoolSuite, ::testing::Values(ceph_testing::CephFsPoolPairs()), PoolPairName);

}  // namespace kvtier::fstest
