// The shared-pool suite (tests/tiers/fs/shared_pool_suite.cc) runs on a "pool pair": one pool directory
// seen through two paths, A and B, as two hosts see one shared filesystem. On a local directory both
// paths are the same; on CephFS they are two ceph-fuse mounts of one directory (tests/tiers/ceph). Each test
// binary instantiates the suite with its own PoolPairSource:
//
//   INSTANTIATE_TEST_SUITE_P(Local, SharedPoolSuite, ::testing::Values(LocalPoolPairs()), PoolPairName);
//
// The suite's worker processes are fs_pool_worker (FS_POOL_WORKER, the build path of the binary).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tiers/fs/process_runner.h"

namespace kvtier::fstest {

struct PoolPair {
  std::string a, b;         // the same pool directory through path A and path B
  std::string scratch;      // a directory for outputs and stop files (not in the pool)
  std::string skip;         // non-empty: the test skips with this reason
  std::shared_ptr<void> keep;  // whatever must live as long as the pair (a temporary directory)
};

struct PoolPairSource {
  std::string name;  // "Local", "CephFs": the instantiation's parameter name
  // The pair for test `test`: a fresh pool directory, the same one through A and B.
  std::function<PoolPair(const std::string& test)> make;
  // Sizes: kept smaller where each round trip is a network (FUSE) request.
  int workers = 4;
  uint64_t ops_per_worker = 2000;
  size_t prompt_chunks = 128;
  size_t crash_cycles = 10;  // each on a fresh pool (pool path + cycle number)
  unsigned crash_run_ms = 40;  // a crash writer is killed at a random moment within this much saving
  size_t race_chunks = 200;
};

// Both paths the same local temporary directory.
PoolPairSource LocalPoolPairs();

inline void PrintTo(const PoolPairSource& s, std::ostream* os) { *os << s.name; }

inline std::string PoolPairName(const ::testing::TestParamInfo<PoolPairSource>& info) { return info.param.name; }

class SharedPoolSuite : public ::testing::TestWithParam<PoolPairSource> {
 protected:
  void SetUp() override;
  PoolPair pair_;
};

// Waits for every `mix` worker and checks its summary: exited cleanly, no wrong or torn chunk, no
// failed put. `where(i)` names worker i's path in messages. Returns the hits all workers counted.
long long ExpectCleanMixWorkers(const std::vector<Child>& workers, const std::function<std::string(size_t)>& where);

}  // namespace kvtier::fstest
