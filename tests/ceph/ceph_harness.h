// Test harness: a single-host Ceph cluster started through scripts/ceph-cluster.sh in a temporary
// folder, once per test binary (CephEnvironment, or LocalCeph::Shared() for suites that start it on
// first use), and stopped by the PIDs the script recorded. Tests skip with SkipReason() when the Ceph
// packages are not installed, or in sanitizer builds (librados is not instrumented).
#pragma once

#include <memory>
#include <string>
#include <vector>

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

}  // namespace kvtier::ceph_testing
