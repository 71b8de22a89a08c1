#include "tiers/ceph/ceph_harness.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>

namespace kvtier::ceph_testing {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

Result<std::string> Shell(const std::string& cmd, const std::string& what) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return Status::IOError("popen failed");
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return Status::IOError(what + " failed: " + out);
  return out;
}

std::string Script() { return std::string("bash ") + KVTIER_CEPH_SCRIPT; }

}  // namespace

std::string SkipReason() {
  if (kSanitized) return "Ceph tests are skipped in sanitizer builds (librados and the daemons are not instrumented)";
  for (const char* bin : {"ceph-mon", "ceph-osd", "ceph-mds", "ceph-fuse", "radosgw"}) {
    if (std::system(("command -v " + std::string(bin) + " >/dev/null 2>&1").c_str()) != 0) {
      return std::string(bin) + " is not installed (scripts/install-deps.sh installs the Ceph packages)";
    }
  }
  if (access("/dev/fuse", R_OK | W_OK) != 0) return "no /dev/fuse here (CephFS is mounted through ceph-fuse)";
  return "";
}

Result<std::unique_ptr<LocalCeph>> LocalCeph::Start(const std::string& args) {
  auto c = std::unique_ptr<LocalCeph>(new LocalCeph());
  char tmpl[] = "/tmp/kvtier-ceph-test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::IOError("mkdtemp failed");
  c->dir_ = tmpl;
  const auto t0 = std::chrono::steady_clock::now();
  // stderr (progress) goes to a log in the folder; stdout holds the URLs.
  auto out = Shell(Script() + " start " + c->dir_ + " " + args + " 2>" + c->dir_ + "/start.log", "ceph-cluster.sh start");
  if (!out.ok()) {
    auto log = Shell("tail -20 " + c->dir_ + "/start.log", "tail");
    return Status::IOError(out.status().message() + (log.ok() ? *log : ""));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::istringstream lines(*out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("fs://")) c->mounts_.push_back(line.substr(5));
    if (line.starts_with("rados://")) c->rados_ = line;
    if (line.starts_with("s3://")) c->s3_ = line;
  }
  std::cout << "[ceph] cluster (" << (args.empty() ? "all" : args) << ") started in " << secs << " s in " << c->dir_
            << std::endl;
  if (c->rados_.empty()) return Status::IOError("no rados:// URL from ceph-cluster.sh: " + *out);
  return c;
}

LocalCeph* LocalCeph::Shared() {
  static std::unique_ptr<LocalCeph> shared;
  static bool tried = false;
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (!tried) {
    tried = true;
    auto c = Start("");
    if (c.ok()) {
      shared = std::move(c).value();
    } else {
      std::cout << "[ceph] cluster did not start: " << c.status().ToString() << std::endl;
    }
  }
  return shared.get();
}

LocalCeph::~LocalCeph() {
  if (dir_.empty()) return;
  (void)Shell(Script() + " stop " + dir_, "ceph-cluster.sh stop");
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Status LocalCeph::Run(const std::string& command) const {
  return Shell(Script() + " " + command + " " + dir_, "ceph-cluster.sh " + command).status();
}

Status LocalCeph::Ceph(const std::string& args) const {
  return Shell("timeout 60 ceph -c " + conf() + " " + args, "ceph " + args).status();
}

void ClusterEnvironment::SetUp() {
  if (!SkipReason().empty()) {
    std::cout << "[ceph] skipped: " << SkipReason() << std::endl;
    return;
  }
  auto c = LocalCeph::Start(args_);
  if (!c.ok()) {
    std::cout << "[ceph] cluster did not start: " << c.status().ToString() << std::endl;
    return;
  }
  cluster_ = std::move(c).value();
  *slot_ = cluster_.get();
}

void ClusterEnvironment::TearDown() {
  *slot_ = nullptr;
  cluster_.reset();
}

}  // namespace kvtier::ceph_testing
