// `kvtier gc` end to end: the real binary on a real pool (and `kvtier stats`' read mode of a pool).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/chunk_format.h"
#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_layout.h"
#include "tiers/fs/process_runner.h"

namespace kvtier::fstest {
namespace {

class GcCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    auto t = internal::OpenFsTier(*TierUrl::Parse("fs://" + Pool() + "?neg_ttl_ms=0&pos_ttl_ms=0"));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
    for (size_t i = 0; i < keys_.size(); ++i) {
      auto data = PayloadFor(keys_[i], ns_.layout().BytesPerChunk());
      ASSERT_TRUE(tier_->Put(ChunkId::Of(ns_, keys_[i]), OnePiece(data).src()).ok());
    }
  }
  std::string Pool() const { return dir_.path() + "/pool"; }
  ChildResult Gc(std::vector<std::string> args) {
    args.insert(args.begin(), {KVTIER_CLI, "gc", "--target", "fs://" + Pool()});
    return Wait(Spawn(args, dir_.path() + "/gc.out"));
  }
  size_t Present() {
    size_t n = 0;
    for (const ChunkKey& k : keys_) n += tier_->Contains(ChunkId::Of(ns_, k)) ? 1 : 0;
    return n;
  }

  TempDir dir_;
  Namespace ns_ = TestNamespace();
  std::vector<ChunkKey> keys_ = TestKeys(ns_, 10);
  std::unique_ptr<Tier> tier_;
  const uint64_t stored_ = internal::StoredChunkBytes(ns_.layout().BytesPerChunk());
};

TEST_F(GcCliTest, DryRunThenEvict) {
  const std::string max = std::to_string(4 * stored_);
  ChildResult r = Gc({"--max-size", max, "--dry-run"});
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("would remove evict"), std::string::npos) << r.output;
  EXPECT_EQ(Present(), 10u);

  r = Gc({"--max-size", max, "--json"});
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"chunks_evicted\":6"), std::string::npos) << r.output;
  EXPECT_EQ(Present(), 4u);
}

TEST_F(GcCliTest, CapacityFromTheUrlAndGrace) {
  // An earlier build's temporary, an hour old.
  const std::string stale = internal::PoolChunkPathForTesting(Pool(), ChunkId::Of(ns_, keys_[0])) + ".tmp.1.2.3";
  std::ofstream(stale) << "left behind";
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= 3600;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, stale.c_str(), times, 0), 0);
  ChildResult r = Wait(Spawn({KVTIER_CLI, "gc", "--target", "fs://" + Pool() + "?capacity=" + std::to_string(20 * stored_),
                              "--grace", "10m", "--quiet"},
                             dir_.path() + "/gc.out"));
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 stale temporaries"), std::string::npos) << r.output;
  EXPECT_EQ(Present(), 10u);
}

TEST_F(GcCliTest, ErrorsAreReported) {
  ChildResult r = Gc({});  // no size anywhere
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = Wait(Spawn({KVTIER_CLI, "gc", "--target", "file://" + Pool(), "--max-size", "1"}, dir_.path() + "/gc.out"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = Wait(Spawn({KVTIER_CLI, "gc", "--target", "fs://" + dir_.path() + "/none", "--max-size", "1"},
                 dir_.path() + "/gc.out"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("NotFound"), std::string::npos) << r.output;
  r = Gc({"--max-size", "1", "--grace", "ten"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

// `kvtier stats` says how the pool is read: a plain (read-only) stats changes nothing and says it did
// not time; --probe-reads runs the probe on an existing pool and leaves no file; it refuses other tiers
// and a capacity= (whose open would run a gc pass).
TEST_F(GcCliTest, StatsShowsTheReadModeAndProbeReadsLeavesNothing) {
  auto stats = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {KVTIER_CLI, "stats"});
    return Wait(Spawn(args, dir_.path() + "/stats.out"));
  };
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(Pool())) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto before = names();
  ChildResult r = stats({"--target", "fs://" + Pool()});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_NE(r.output.find("read_mode  "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("read-only open: not timed"), std::string::npos) << r.output;
  r = stats({"--json", "--probe-reads", "--target", "fs://" + Pool()});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_NE(r.output.find("\"read_mode\": \""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("auto: probe of"), std::string::npos) << r.output;
  EXPECT_EQ(names(), before);
  r = stats({"--probe-reads", "--target", "fs://" + Pool() + "?capacity=1GiB"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = stats({"--probe-reads", "--target", "fs://" + dir_.path() + "/missing"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/missing"));  // never created
}

}  // namespace
}  // namespace kvtier::fstest
