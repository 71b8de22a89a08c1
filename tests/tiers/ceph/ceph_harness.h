// Test harness: a single-host Ceph cluster started through scripts/ceph-cluster.sh in a temporary
// folder, once per test binary (CephEnvironment, or LocalCeph::Shared() for suites that start it on
// first use), and stopped by the PIDs the script recorded. Tests skip with SkipReason() when the Ceph
// packages are not installed, or in sanitizer builds (librados is not instrumented).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/status.h"

namespace kvtier::ceph_testing {

// Empty when the cluster can be started here, else why the Ceph tests are skipped.
std::string SkipReason();

class LocalCeph {
 public:
  // Starts the cluster (`args`: "--no-fs", "--no-rgw") and prints its start time.
  static Result<std::unique_ptr<LocalCeph>> Start(const std::string& args);
  // One cluster for the whole process, with everything, started on first use; nullptr when it cannot
  // start (the reason is printed once).
  static LocalCeph* Shared();
  ~LocalCeph();

  const std::string& dir() const { return dir_; }
  const std::string& rados_url() const { return rados_; }  // rados://kvtier?conf=...
  const std::string& s3_url() const { return s3_; }        // empty with --no-rgw
  const std::vector<std::string>& fs_mounts() const { return mounts_; }  // two paths, empty with --no-fs
  std::string conf() const { return dir_ + "/ceph.conf"; }

  // The script's fault commands: "osd-stop", "osd-start", "rgw-stop", "rgw-start".
  Status Run(const std::string& command) const;
  // A `ceph` CLI command against this cluster (e.g. "osd pool set-quota kvtier max_bytes 0").
  Status Ceph(const std::string& args) const;

 private:
  std::string dir_, rados_, s3_;
  std::vector<std::string> mounts_;
};

// Starts one cluster (`args` as for LocalCeph::Start) for the whole test binary and stops it at the end;
// `*slot` points at it while it runs (nullptr when Ceph is missing or the start failed: the reason is
// printed). Register with ::testing::AddGlobalTestEnvironment.
class ClusterEnvironment : public ::testing::Environment {
 public:
  ClusterEnvironment(std::string args, LocalCeph** slot) : args_(std::move(args)), slot_(slot) {}
  void SetUp() override;
  void TearDown() override;

 private:
  const std::string args_;
  LocalCeph** const slot_;
  std::unique_ptr<LocalCeph> cluster_;
};

}  // namespace kvtier::ceph_testing
