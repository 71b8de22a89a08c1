// `kvtier verify` end to end: chunks saved through a file:// tier, one byte flipped on disk, then the
// real executable must exit 1 and the chunk must be a miss afterwards; a sound tier exits 0.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/chunk_format.h"
#include "file/file_layout.h"
#include "file/file_test_util.h"
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

TEST_F(VerifyCliTest, FlippedByteExitsOneAndTheChunkBecomesAMiss) {
  const std::string path = internal::ChunkFilePath(dir_.path(), ns_.id(), KeyNo(ns_, 1));
  FlipByte(path, internal::kChunkHeaderSize + 33);
  const CliRun run = RunKvtier("verify --target '" + url_ + "'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("corrupt  " + ns_.Hex() + "/" + KeyNo(ns_, 1).Hex()), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("2 sound, 1 corrupt"), std::string::npos) << run.output;
  // verify removed the file; the tier that saved it now misses instead of loading bad bytes.
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(Get(1).ok());
  EXPECT_TRUE(Get(1).IsNotFound());
  EXPECT_TRUE(Get(0).ok());
  // And a second verify finds a sound tier again.
  EXPECT_EQ(RunKvtier("verify --target '" + url_ + "'").exit_code, 0);
}

TEST_F(VerifyCliTest, CorruptChunkIsAMissEvenBeforeVerifyRuns) {
  FlipByte(internal::ChunkFilePath(dir_.path(), ns_.id(), KeyNo(ns_, 2)), internal::kChunkHeaderSize);
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
  TempDir dir;
  const CliRun inspect = RunKvtier("inspect --json --target 'file://" + dir.path() + "'");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("\"chunks\": 0"), std::string::npos) << inspect.output;
}

}  // namespace
}  // namespace kvtier
