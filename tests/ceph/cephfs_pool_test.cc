// The shared fs:// pool across two CephFS mounts of one cluster (two ceph-fuse clients: two "hosts"),
// started once for this binary: a process saves through one mount and a process on the other finds and
// loads every chunk byte-exact; processes on both mounts share a pool while gc runs beside them. The
// workers are fs_pool_worker (tests/fs), the same as the local-directory tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "ceph/ceph_harness.h"
#include "core/chunk_format.h"
#include "fs/fs_test_support.h"
#include "fs/process_runner.h"

namespace kvtier::ceph_testing {
namespace {

using fstest::Field;
using fstest::Spawn;
using fstest::Wait;

LocalCeph* g_fs = nullptr;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new ClusterEnvironment("--no-rgw", &g_fs));

class CephFsPool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
    ASSERT_NE(g_fs, nullptr) << "the cluster did not start (see above)";
    ASSERT_EQ(g_fs->fs_mounts().size(), 2u);
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    // The same directory seen through each mount.
    pool_a_ = g_fs->fs_mounts()[0] + "/" + name + "/pool";
    pool_b_ = g_fs->fs_mounts()[1] + "/" + name + "/pool";
    out_ = g_fs->dir() + "/" + name;
    std::filesystem::create_directories(out_);
  }
  std::string pool_a_, pool_b_, out_;
};

TEST_F(CephFsPool, SavedThroughOneMountLoadsByteExactThroughTheOther) {
  constexpr int kChunks = 48;
  const auto a = Wait(Spawn({FS_POOL_WORKER, "save", pool_a_, std::to_string(kChunks)}, out_ + "/a.out"));
  ASSERT_TRUE(a.exited) << a.output;
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // B: another process on the other mount, with its own empty memory tier: Lookup, then Load checks
  // every byte against the key-derived payload (exit 3 on a wrong byte).
  const auto b = Wait(Spawn({FS_POOL_WORKER, "load", pool_b_, std::to_string(kChunks)}, out_ + "/b.out"));
  ASSERT_TRUE(b.exited) << b.output;
  EXPECT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(Field(b.output, "loaded"), kChunks) << b.output;
  std::cout << "[cephfs] A (mnt-a): " << a.output << "[cephfs] B (mnt-b): " << b.output;
}

TEST_F(CephFsPool, ProcessesOnBothMountsAndGcNeverSeeWrongBytes) {
  // Create the pool first, through mount A.
  auto first = Wait(Spawn({FS_POOL_WORKER, "mix", pool_a_, "9", "1"}, out_ + "/init.out"));
  ASSERT_TRUE(first.exited && first.exit_code == 0) << first.output;
  const uint64_t stored = internal::StoredChunkBytes(fstest::TestNamespace().layout().BytesPerChunk());
  const uint64_t max_bytes = 24 * stored;  // under what the workers use: gc evicts while they read
  const std::string stop = out_ + "/stop";
  const auto gc = Spawn({FS_POOL_WORKER, "gc", pool_b_, std::to_string(max_bytes), stop}, out_ + "/gc.out");
  ASSERT_GT(gc.pid, 0);
  std::vector<fstest::Child> workers;
  for (int w = 0; w < 4; ++w) {
    const std::string& pool = w % 2 == 0 ? pool_a_ : pool_b_;
    workers.push_back(Spawn({FS_POOL_WORKER, "mix", pool, std::to_string(w), "300"}, out_ + "/w" + std::to_string(w)));
    ASSERT_GT(workers.back().pid, 0);
  }
  long long hits = 0;
  for (size_t w = 0; w < workers.size(); ++w) {
    const auto r = Wait(workers[w]);
    ASSERT_TRUE(r.exited) << "worker " << w << " crashed: " << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(Field(r.output, "mismatches"), 0) << r.output;
    EXPECT_EQ(Field(r.output, "torn"), 0) << r.output;
    EXPECT_EQ(Field(r.output, "put_errors"), 0) << r.output;
    hits += Field(r.output, "hits");
    std::cout << "[cephfs] worker " << w << " (mnt-" << (w % 2 == 0 ? 'a' : 'b') << "): " << r.output;
  }
  std::ofstream(stop) << "stop";
  const auto g = Wait(gc);
  ASSERT_TRUE(g.exited) << g.output;
  EXPECT_EQ(g.exit_code, 0) << g.output;
  EXPECT_GT(Field(g.output, "passes"), 0) << g.output;
  EXPECT_GT(hits, 0);
}

}  // namespace
}  // namespace kvtier::ceph_testing
