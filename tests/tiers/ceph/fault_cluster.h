// The cluster of ceph_fault_test (mon, mgr, OSD, radosgw; no CephFS), started once for the binary by the
// environment in rados_fault_test.cc; nullptr when it did not start or Ceph is not installed.
#pragma once

#include "tiers/ceph/ceph_harness.h"

namespace kvtier::ceph_testing {
extern LocalCeph* g_ceph;
}  // namespace kvtier::ceph_testing
