// The cluster of ceph_fault_test (mon, mgr, OSD, radosgw; no CephFS), started once for the binary by the
// environment in rados_fault_test.cc; nullptr when it did not start or Ceph is not installed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "tiers/ceph/ceph_harness.h"
#include "tiers/object/object_client.h"
#include "tiers/object/object_reference.h"

namespace kvtier::ceph_testing {
extern LocalCeph* g_ceph;

// What a bench reference (rados/rados_reference.h, s3/s3_reference.h) of `objects` objects of `bytes`
// bytes must report: every object written and read back whole, no error, a timed write.
inline void ExpectWholeRoundTrip(const object::RawRoundTrip& r, uint64_t objects, uint64_t bytes) {
  EXPECT_EQ(r.write.objects, objects);
  EXPECT_EQ(r.write.bytes, objects * bytes);
  EXPECT_EQ(r.write.errors, 0u);
  EXPECT_GT(r.write.seconds, 0.0);
  EXPECT_EQ(r.read.objects, objects);
  EXPECT_EQ(r.read.bytes, objects * bytes);
  EXPECT_EQ(r.read.errors, 0u);
}

// The store `client` reaches lists no object: a reference removed everything it wrote.
inline void ExpectNoObjectsLeft(object::ObjectClient& client) {
  int left = 0;
  ASSERT_TRUE(client.List("", [&](const object::ObjectInfo&) { return ++left > 0; }).ok());
  EXPECT_EQ(left, 0) << "the reference removes what it wrote";
}
}  // namespace kvtier::ceph_testing
