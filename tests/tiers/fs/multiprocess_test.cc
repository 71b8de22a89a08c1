// The shared-pool suite (shared_pool_suite.cc) on a local directory: both paths of the pool pair are
// the same directory. The same suite runs across two CephFS mounts in tests/tiers/ceph/cephfs_pool_test.cc.
#include "tiers/fs/pool_pair.h"

namespace kvtier::fstest {

INSTANTIATE_TEST_SUITE_P(Pool, SharedPoolSuite, ::testing::Values(LocalPoolPairs()), PoolPairName);

}  // namespace kvtier::fstest
