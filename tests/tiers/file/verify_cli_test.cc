// `kvtier verify` end to end: chunks saved through a file:// tier, one byte flipped on disk, then the
// real executable must exit 1 and leave the file alone; with --repair it removes it, and the chunk is a
// miss afterwards; a sound tier exits 0.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/chunk_format.h"
#include "tiers/file/file_test_util.h"
#include "tiers/file/file_tier.h"
#include "kvtier/tier.h"

namespace kvtier {
namespace {

using testing::FlipByte;
using testing::KeyNo;
using testing::OnePiece;
using testing::PayloadFor;
using testing::TempDir;
using testing::TestNamespace;

struct CliRun {
  int exit_code = -1;
  std::string output;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

CliRun RunKvtier(const std::string& args) {
  CliRun run;
  const char* bin_dir = std::getenv("KVTIER_BIN_DIR");
  const std::string cmd = std::string(bin_dir) + "/src/tools/kvtier " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) run.output.append(buf, n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

class VerifyCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("KVTIER_BIN_DIR") == nullptr) GTEST_SKIP() << "KVTIER_BIN_DIR unset: run via ctest";
    url_ = "file://" + dir_.path() + "?capacity=1MiB";
    auto t = OpenTier(url_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
    for (uint32_t n = 0; n < 3; ++n) {
      auto payload = PayloadFor(KeyNo(ns_, n), ns_.layout().BytesPerChunk());
      OnePiece p(payload);
      ASSERT_TRUE(tier_->Put(ChunkId::Of(ns_, KeyNo(ns_, n)), p.src()).ok());
    }
  }
  std::string PathOf(uint32_t n) const {
    return internal::FileChunkPathForTesting(dir_.path(), ChunkId::Of(ns_, KeyNo(ns_, n)));
  }
  Status Get(uint32_t n) {
    std::vector<std::byte> out(ns_.layout().BytesPerChunk());
    OnePiece p(out);
    return tier_->Get(ChunkId::Of(ns_, KeyNo(ns_, n)), p.dst());
  }

  TempDir dir_;
  Namespace ns_ = TestNamespace();
  std::string url_;
  std::unique_ptr<Tier> tier_;
};

TEST_F(VerifyCliTest, SoundTierExitsZero) {
  const CliRun run = RunKvtier("verify --target '" + url_ + "'");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("3 sound, 0 corrupt"), std::string::npos) << run.output;
}

// Plain verify only looks: it reports the flipped chunk and exits 1 but leaves the file as it was
// (earlier builds removed it here); --repair removes it.
TEST_F(VerifyCliTest, FlippedByteExitsOneAndRepairMakesTheChunkAMiss) {
  const std::string path = PathOf(1);
  FlipByte(path, internal::kChunkHeaderSize + 33);
  const std::string damaged = ReadAll(path);
  const CliRun run = RunKvtier("verify --target '" + url_ + "'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("corrupt  " + ns_.Hex() + "/" + KeyNo(ns_, 1).Hex()), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("2 sound, 1 corrupt"), std::string::npos) << run.output;
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(ReadAll(path), damaged);
  EXPECT_EQ(RunKvtier("verify --target '" + url_ + "'").exit_code, 1);  // still there, still reported

  const CliRun repair = RunKvtier("verify --repair --target '" + url_ + "'");
  EXPECT_EQ(repair.exit_code, 1) << repair.output;
  EXPECT_NE(repair.output.find("2 sound, 1 corrupt"), std::string::npos) << repair.output;
  // verify --repair removed the file; the tier that saved it now misses instead of loading bad bytes.
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(Get(1).ok());
  EXPECT_TRUE(Get(1).IsNotFound());
  EXPECT_TRUE(Get(0).ok());
  // And a second verify finds a sound tier again.
  EXPECT_EQ(RunKvtier("verify --target '" + url_ + "'").exit_code, 0);
}

TEST_F(VerifyCliTest, CorruptChunkIsAMissEvenBeforeVerifyRuns) {
  FlipByte(PathOf(2), internal::kChunkHeaderSize);
  EXPECT_TRUE(Get(2).IsCorruption());
  EXPECT_TRUE(Get(2).IsNotFound());
  EXPECT_EQ(tier_->Stats().corrupt, 1u);
}

TEST(VerifyCliErrors, BadUrlsExitTwo) {
  if (std::getenv("KVTIER_BIN_DIR") == nullptr) GTEST_SKIP() << "KVTIER_BIN_DIR unset: run via ctest";
  for (const char* bad : {"nonsense", "nosuch://x", "file:///tmp/x?capacty=1GiB"}) {
    const CliRun run = RunKvtier(std::string("verify --target '") + bad + "'");
    EXPECT_EQ(run.exit_code, 2) << bad << ": " << run.output;
    EXPECT_NE(run.output.find("cannot open --target"), std::string::npos) << run.output;
  }
  // Looking at a directory that holds no tier is an error, and does not make one there.
  TempDir dir;
  const CliRun empty = RunKvtier("inspect --json --target 'file://" + dir.path() + "'");
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("cannot open --target"), std::string::npos) << empty.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  // An empty tier made by a writer is inspected as such.
  ASSERT_TRUE(OpenTier("file://" + dir.path()).ok());
  const CliRun inspect = RunKvtier("inspect --json --target 'file://" + dir.path() + "'");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("\"chunks\": 0"), std::string::npos) << inspect.output;
}

}  // namespace
}  // namespace kvtier
