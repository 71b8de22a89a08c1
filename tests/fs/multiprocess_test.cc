// Four processes share one pool while a fifth runs gc: every load must be the bytes that were saved.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/chunk_format.h"
#include "fs/fs_test_support.h"
#include "fs/fs_tier.h"
#include "fs/pool_gc.h"
#include "fs/pool_layout.h"
#include "fs/process_runner.h"

namespace kvtier::fstest {
namespace {

constexpr int kWorkers = 4;
constexpr int kOpsPerWorker = 2000;

uint64_t PoolChunkBytes(const std::string& root) {
  uint64_t total = 0;
  auto pool = internal::OpenPool(root, internal::ChunkDirOptions{.read_only = true});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  if (!pool.ok()) return total;
  EXPECT_TRUE((*pool)->Walk([&](const internal::WalkEntry& e) {
    if (e.kind == internal::EntryKind::kChunk || e.kind == internal::EntryKind::kTemp) total += e.stat.size;
    return true;
  }).ok());
  return total;
}

TEST(FsMultiProcessTest, FourProcessesAndGcNeverSeeWrongBytes) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string pool = dir.path() + "/pool";
  ASSERT_TRUE(internal::OpenFsTier(*TierUrl::Parse("fs://" + pool)).ok());
  // Well under the ~112 chunks the workers use, so gc evicts while they read.
  const uint64_t stored = internal::StoredChunkBytes(TestNamespace().layout().BytesPerChunk());
  const uint64_t max_bytes = 24 * stored;
  const std::string stop = dir.path() + "/stop";

  const Child gc = Spawn({FS_POOL_WORKER, "gc", pool, std::to_string(max_bytes), stop}, dir.path() + "/gc.out");
  ASSERT_GT(gc.pid, 0);
  std::vector<Child> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(Spawn({FS_POOL_WORKER, "mix", pool, std::to_string(w), std::to_string(kOpsPerWorker)},
                            dir.path() + "/w" + std::to_string(w) + ".out"));
    ASSERT_GT(workers.back().pid, 0);
  }
  long long hits = 0;
  for (int w = 0; w < kWorkers; ++w) {
    const ChildResult r = Wait(workers[w]);
    ASSERT_TRUE(r.exited) << "worker " << w << " crashed: " << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(Field(r.output, "mismatches"), 0) << r.output;
    EXPECT_EQ(Field(r.output, "torn"), 0) << r.output;
    EXPECT_EQ(Field(r.output, "put_errors"), 0) << r.output;
    hits += Field(r.output, "hits");
  }
  std::ofstream(stop) << "stop";
  const ChildResult g = Wait(gc);
  ASSERT_TRUE(g.exited) << "gc crashed: " << g.output;
  EXPECT_EQ(g.exit_code, 0) << g.output;
  EXPECT_GT(Field(g.output, "passes"), 0) << g.output;
  EXPECT_GT(hits, 0);  // loads really happened, so the byte check above means something

  auto last = internal::CollectPoolGarbage(pool, internal::GcOptions{.max_bytes = max_bytes});
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_LE(PoolChunkBytes(pool), max_bytes);
}

}  // namespace
}  // namespace kvtier::fstest
