// fs://'s per-mount read mode (fs/read_probe.h) and its publication that never replaces a published
// name (fs/pool_publish.h).
#include "tiers/fs/read_probe.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_layout.h"
#include "tiers/fs/pool_publish.h"
#include "io/dir_names.h"
#include "metrics/stats_json.h"
#include "testing/fault_fs.h"

extern char** environ;

namespace kvtier::internal {
namespace {

using fstest::OnePiece;
using fstest::PayloadFor;

// Every name in the tree with its size and mtime: what "changes nothing" compares.
std::map<std::string, std::pair<uint64_t, int64_t>> Snapshot(const std::string& root) {
  std::map<std::string, std::pair<uint64_t, int64_t>> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    struct stat st;
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = {static_cast<uint64_t>(st.st_size),
                              st.st_mtim.tv_sec * 1'000'000'000ll + st.st_mtim.tv_nsec};
  }
  struct stat st;
  ::lstat(root.c_str(), &st);
  out[root] = {0, st.st_mtim.tv_sec * 1'000'000'000ll + st.st_mtim.tv_nsec};
  return out;
}

bool HasProbeFile(const std::string& root) {
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (e.path().filename().string().rfind(std::string(kReadProbeName), 0) == 0) return true;
  }
  return false;
}

class ReadProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    root_ = dir_.path() + "/pool";
    ASSERT_TRUE(OpenFsTier(*TierUrl::Parse("fs://" + root_ + "?direct=off")).ok());  // creates the pool
  }
  std::unique_ptr<ChunkDir> Pool(bool read_only = false, std::shared_ptr<FileSystem> fs = nullptr) {
    auto p = OpenPool(root_, ChunkDirOptions{.read_only = read_only, .fs = std::move(fs)});
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  fstest::TempDir dir_;
  std::string root_;
};

TEST(ReadModeRuleTest, ParsesModesAndKeepsDirectUnlessClearlySlower) {
  EXPECT_EQ(*ParseFsDirectMode("auto"), FsDirectMode::kAuto);
  EXPECT_EQ(*ParseFsDirectMode("on"), FsDirectMode::kOn);
  EXPECT_EQ(*ParseFsDirectMode("true"), FsDirectMode::kOn);  // the boolean of earlier builds
  EXPECT_EQ(*ParseFsDirectMode("off"), FsDirectMode::kOff);
  EXPECT_EQ(*ParseFsDirectMode("0"), FsDirectMode::kOff);
  EXPECT_EQ(ParseFsDirectMode("maybe").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseFsTierOptions(*TierUrl::Parse("fs:///x?direct=maybe")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseFsTierOptions(*TierUrl::Parse("fs:///x"))->direct, FsDirectMode::kAuto);
  // Reads verify on a pool as file:// does (a verifying ring thread submits nothing meanwhile).
  EXPECT_EQ(ParseFsTierOptions(*TierUrl::Parse("fs:///x"))->verify_threads, DefaultVerifyThreads());
  EXPECT_EQ(FsTierOptions{}.verify_threads, DefaultVerifyThreads());
  EXPECT_GE(DefaultVerifyThreads(), 1u);
  EXPECT_EQ(ParseFsTierOptions(*TierUrl::Parse("fs:///x?verify_threads=0"))->verify_threads, 0u);
  EXPECT_FALSE(KeepDirect(0.62, 1.0));  // ceph-fuse as measured in issue 14
  EXPECT_TRUE(KeepDirect(0.85, 1.0));
  EXPECT_TRUE(KeepDirect(2.2, 0.7));
}

TEST_F(ReadProbeTest, WritableProbeTimesBothModesAndLeavesNothing) {
  auto pool = Pool();
  ASSERT_NE(pool, nullptr);
  const bool direct_ok = pool->ProbeDirectIo();
  const ReadModeChoice c = ChooseReadMode(*pool, ReadProbeOptions{.use_cache = false});
  EXPECT_GT(c.buffered_gbps, 0) << c.reason;
  if (direct_ok) {
    EXPECT_GT(c.direct_gbps, 0) << c.reason;
    EXPECT_EQ(c.direct, KeepDirect(c.direct_gbps, c.buffered_gbps)) << c.reason;
  } else {
    EXPECT_FALSE(c.direct) << c.reason;
  }
  EXPECT_NE(c.reason.find("auto: probe of"), std::string::npos) << c.reason;
  EXPECT_FALSE(HasProbeFile(root_));
  std::printf("[probe] %s: %s\n", root_.c_str(), DescribeReadMode(c).c_str());
}

TEST_F(ReadProbeTest, ReadOnlyOpenWritesNothingAndSaysSo) {
  const auto before = Snapshot(root_);
  auto tier = OpenFsTier(*TierUrl::Parse("fs://" + root_), TierOpenOptions{.read_only = true});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  // A read-only open in a process that probed no device before says it did not time anything; one
  // that did reuses that answer. Either way nothing is written.
  auto pool = Pool(/*read_only=*/true);
  const ReadModeChoice c = ChooseReadMode(*pool, ReadProbeOptions{.read_only = true, .use_cache = false});
  EXPECT_NE(c.reason.find("read-only open: not timed"), std::string::npos) << c.reason;
  EXPECT_EQ(c.direct, pool->ProbeDirectIo());
  EXPECT_FALSE((*tier)->Stats().read_mode.empty());
  EXPECT_EQ(Snapshot(root_), before);
}

TEST_F(ReadProbeTest, ForcedModesAreReportedInStatsAndJson) {
  auto off = OpenFsTier(*TierUrl::Parse("fs://" + root_ + "?direct=off"));
  ASSERT_TRUE(off.ok());
  EXPECT_EQ((*off)->Stats().read_mode, "buffered (direct=off)");
  EXPECT_FALSE((*off)->capabilities().direct_io);
  EXPECT_EQ(TierStatsJson((*off)->Stats())["read_mode"], "buffered (direct=off)");
  auto on = OpenFsTier(*TierUrl::Parse("fs://" + root_ + "?direct=on"));
  ASSERT_TRUE(on.ok());
  const std::string mode = (*on)->Stats().read_mode;
  if ((*on)->capabilities().direct_io) {
    EXPECT_EQ(mode, "O_DIRECT (direct=on)");
  } else {
    EXPECT_EQ(mode.rfind("buffered (direct=on", 0), 0u) << mode;
  }
  auto mem = OpenTier("mem://?capacity=1MiB");
  ASSERT_TRUE(mem.ok());
  EXPECT_FALSE(TierStatsJson((*mem)->Stats()).contains("read_mode"));  // only where a tier chooses
}

TEST_F(ReadProbeTest, FailingProbeReadsAreNeverChosenAndTheFileIsRemoved) {
  auto posix = OpenPosixFileSystem(root_, PosixFsOptions{});
  ASSERT_TRUE(posix.ok());
  auto faults = std::make_shared<testing::FaultFileSystem>(*posix);
  const size_t rule = faults->Add({.op = testing::FsOp::kRead, .path = std::string(kReadProbeName), .error = EIO});
  auto pool = Pool(false, faults);
  ASSERT_NE(pool, nullptr);
  const ReadModeChoice c = ChooseReadMode(*pool, ReadProbeOptions{.use_cache = false});
  EXPECT_GT(faults->Fired(rule), 0u);
  EXPECT_EQ(c.direct_gbps, 0) << c.reason;
  EXPECT_EQ(c.buffered_gbps, 0) << c.reason;
  EXPECT_NE(c.reason.find("failed"), std::string::npos) << c.reason;
  EXPECT_FALSE(HasProbeFile(root_));
}

TEST_F(ReadProbeTest, LeftoverOfADeadProberIsRemovedAndOtherNamesAreNot) {
  pid_t pid = 0;
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  ASSERT_EQ(posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);  // gone now
  char writer[17];
  std::snprintf(writer, sizeof(writer), "%016llx", static_cast<unsigned long long>(LocalWriterId()));
  const std::string dead = root_ + "/" + std::string(kReadProbeName) + ".kvtmp." + writer + "." +
                           std::to_string(pid) + ".0123456789abcdef.1";
  const std::string foreign = root_ + "/" + std::string(kReadProbeName) + ".notes";
  std::ofstream(dead) << "left by a killed probe";
  std::ofstream(foreign) << "someone else's";
  ASSERT_TRUE(ParseTempName(std::filesystem::path(dead).filename().string(),
                            [](std::string_view n) { return n == kReadProbeName; }));
  auto pool = Pool();
  (void)ChooseReadMode(*pool, ReadProbeOptions{.use_cache = false});
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(foreign));
}

// Two writers of one chunk: the second publication keeps the first file (same inode), drops its own
// copy and leaves no temporary; the bytes read are the first writer's.
TEST_F(ReadProbeTest, SecondPublicationOfANameKeepsTheFirstFile) {
  auto pool = Pool();
  const Namespace ns = fstest::TestNamespace();
  const auto keys = fstest::TestKeys(ns, 1, 7);
  const ChunkId id = ChunkId::Of(ns, keys[0]);
  auto data = PayloadFor(keys[0], ns.layout().BytesPerChunk());
  auto first = PublishChunk(*pool, id, OnePiece(data).src(), WriteOptions{});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->already_there);
  EXPECT_GT(first->stored_bytes, 0u);
  const std::string path = PoolChunkPathForTesting(root_, id);
  struct stat a, b;
  ASSERT_EQ(::stat(path.c_str(), &a), 0);
  auto second = PublishChunk(*pool, id, OnePiece(data).src(), WriteOptions{});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->already_there);
  ASSERT_EQ(::stat(path.c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(b.st_nlink, 1u);  // the temporary's name is gone
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    files += e.is_regular_file();
  }
  EXPECT_EQ(files, 1u);
}

// Without hard links (link refused, the name still absent) publication falls back to rename.
TEST_F(ReadProbeTest, PublicationWithoutHardLinksFallsBackToRename) {
  auto posix = OpenPosixFileSystem(root_, PosixFsOptions{});
  ASSERT_TRUE(posix.ok());
  auto faults = std::make_shared<testing::FaultFileSystem>(*posix);
  const size_t rule = faults->Add({.op = testing::FsOp::kLink, .path = ".kvc", .error = EPERM});
  FsTierOptions o;
  o.root = root_;
  o.fs = faults;
  o.direct = FsDirectMode::kOff;
  auto tier = OpenFsTierWithOptions(o, "fs://" + root_);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const Namespace ns = fstest::TestNamespace();
  const auto keys = fstest::TestKeys(ns, 1, 8);
  const ChunkId id = ChunkId::Of(ns, keys[0]);
  auto data = PayloadFor(keys[0], ns.layout().BytesPerChunk());
  ASSERT_TRUE((*tier)->Put(id, OnePiece(data).src()).ok());
  EXPECT_GT(faults->Fired(rule), 0u);
  std::vector<std::byte> out(data.size());
  ASSERT_TRUE((*tier)->Get(id, OnePiece(out).dst()).ok());
  EXPECT_EQ(out, data);
}

}  // namespace
}  // namespace kvtier::internal
