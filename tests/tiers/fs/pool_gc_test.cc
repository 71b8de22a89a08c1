#include "tiers/fs/pool_gc.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "core/chunk_format.h"
#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/fs_tier.h"
#include "tiers/fs/pool_layout.h"
#include "io/dir_names.h"
#include "io/fd.h"

namespace kvtier::internal {
namespace {

using fstest::OnePiece;
using fstest::PayloadFor;

// A fresh temporary name beside `path`, as a live writer of this process would make it.
std::string TempBeside(const std::string& path) {
  const std::filesystem::path p(path);
  return (p.parent_path() / MakeTempName(p.filename().string())).string();
}

// Sets both times of `path` to `seconds_ago` before now, so recency order is fixed by the test.
void SetAge(const std::string& path, int64_t seconds_ago) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds_ago;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

class PoolGcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    auto t = OpenFsTier(*TierUrl::Parse("fs://" + Root() + "?neg_ttl_ms=0&pos_ttl_ms=0"));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
  }
  std::string Root() const { return dir_.path() + "/pool"; }
  ChunkId Id(size_t i) const { return ChunkId::Of(ns_, keys_[i]); }
  size_t Bytes() const { return ns_.layout().BytesPerChunk(); }
  uint64_t Stored() const { return StoredChunkBytes(Bytes()); }
  std::string PathOf(size_t i) const { return PoolChunkPathForTesting(Root(), Id(i)); }
  // Saves chunks 0..n-1, chunk i last used n-i minutes ago (chunk 0 is the least recently used).
  void Fill(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      auto data = PayloadFor(keys_[i], Bytes());
      ASSERT_TRUE(tier_->Put(Id(i), OnePiece(data).src()).ok());
      SetAge(PathOf(i), static_cast<int64_t>(60 * (n - i)));
    }
  }
  uint64_t PoolBytes() {
    uint64_t total = 0;
    auto pool = OpenPool(Root(), ChunkDirOptions{.read_only = true});
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    if (!pool.ok()) return total;
    EXPECT_TRUE((*pool)->Walk([&](const WalkEntry& e) {
      if (e.kind == EntryKind::kChunk || e.kind == EntryKind::kTemp) total += e.stat.size;
      return true;
    }).ok());
    return total;
  }
  Result<PoolUsage> Usage() {
    KVTIER_ASSIGN_OR_RETURN(auto pool, OpenPool(Root(), ChunkDirOptions{.read_only = true}));
    return ReadPoolUsage(*pool);
  }

  fstest::TempDir dir_;
  Namespace ns_ = fstest::TestNamespace();
  std::vector<ChunkKey> keys_ = fstest::TestKeys(ns_, 64);
  std::unique_ptr<Tier> tier_;
};

TEST_F(PoolGcTest, EvictsLeastRecentlyUsedUntilTheBoundHolds) {
  Fill(10);
  std::vector<GcAction> actions;
  auto r = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 4 * Stored()},
                              [&](const GcAction& a) { actions.push_back(a); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks_scanned, 10u);
  EXPECT_EQ(r->chunks_evicted, 6u);
  EXPECT_EQ(r->bytes_after, 4 * Stored());
  EXPECT_LE(PoolBytes(), 4 * Stored());
  ASSERT_EQ(actions.size(), 6u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(tier_->Contains(Id(i)), i >= 6) << i;
  EXPECT_EQ(actions[0].path, PathOf(0));
  EXPECT_EQ(actions[0].reason, GcReason::kEvict);
  EXPECT_GE(actions[0].idle_s, 599);
  // A tier opened later without a capacity (so it scans nothing) reports what gc measured.
  auto fresh = OpenFsTier(*TierUrl::Parse("fs://" + Root()));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->Stats().usage_bytes, 4 * Stored());
  EXPECT_EQ((*fresh)->Stats().chunks, 4u);
}

TEST_F(PoolGcTest, AReadRefreshesRecency) {
  Fill(4);
  std::vector<std::byte> out(Bytes());
  ASSERT_TRUE(tier_->Get(Id(0), OnePiece(out).dst()).ok());  // chunk 0 becomes the most recent
  auto r = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 3 * Stored()});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(tier_->Contains(Id(0)));
  EXPECT_FALSE(tier_->Contains(Id(1)));
}

// Sets both times of `path` to `ns` (since the epoch).
void SetTimeNs(const std::string& path, int64_t ns) {
  struct timespec times[2];
  times[0].tv_sec = ns / 1'000'000'000;
  times[0].tv_nsec = ns % 1'000'000'000;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

// Issue 38, policy=window: a chunk read since it was written (mtime past its creation time) outlives a
// flood of one-shot chunks written after that read, which plain LRU evicts it for first.
TEST_F(PoolGcTest, WindowPolicyKeepsAChunkReadSinceWrittenThroughAFloodOfOneShots) {
  auto data = PayloadFor(keys_[0], Bytes());
  ASSERT_TRUE(tier_->Put(Id(0), OnePiece(data).src()).ok());
  struct statx stx {};
  ASSERT_EQ(::statx(AT_FDCWD, PathOf(0).c_str(), 0, STATX_BTIME, &stx), 0);
  if (!(stx.stx_mask & STATX_BTIME)) GTEST_SKIP() << "this filesystem records no creation time";
  // Read well after it was written: 1 s ago, and more than a second after its creation.
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  SetAge(PathOf(0), 1);
  struct stat hot {};
  ASSERT_EQ(::stat(PathOf(0).c_str(), &hot), 0);
  const int64_t read_ns = int64_t{hot.st_mtim.tv_sec} * 1'000'000'000 + hot.st_mtim.tv_nsec;
  for (size_t i = 1; i <= 20; ++i) {  // one-shots, each used once, all after the read
    auto d = PayloadFor(keys_[i], Bytes());
    ASSERT_TRUE(tier_->Put(Id(i), OnePiece(d).src()).ok());
    SetTimeNs(PathOf(i), read_ns + static_cast<int64_t>(i) * 1'000'000);
  }
  std::vector<GcAction> lru;
  auto dry = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 10 * Stored(), .dry_run = true},
                                [&](const GcAction& a) { lru.push_back(a); });
  ASSERT_TRUE(dry.ok()) << dry.status().ToString();
  ASSERT_EQ(lru.size(), 11u);
  EXPECT_EQ(lru[0].path, PathOf(0)) << "plain LRU evicts the chunk that was read first";
  std::vector<GcAction> window;
  auto r = CollectPoolGarbage(
      Root(), GcOptions{.max_bytes = 10 * Stored(), .policy = EvictionPolicy::kWindow},
      [&](const GcAction& a) { window.push_back(a); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks_evicted, 11u);
  EXPECT_TRUE(tier_->Contains(Id(0)));
  for (const GcAction& a : window) EXPECT_NE(a.path, PathOf(0));
  size_t one_shots_left = 0;  // which ones: the dry run's header reads moved their atimes (relatime)
  for (size_t i = 1; i <= 20; ++i) one_shots_left += tier_->Contains(Id(i));
  EXPECT_EQ(one_shots_left, 9u);
}

TEST_F(PoolGcTest, DryRunReportsButRemovesNothing) {
  Fill(5);
  const std::string stale = PathOf(0) + ".tmp.4242.1.0";  // an earlier build's writer, an hour ago
  std::ofstream(stale) << "left by a dead writer";
  SetAge(stale, 3600);
  std::vector<GcAction> actions;
  auto r = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 2 * Stored(), .dry_run = true},
                              [&](const GcAction& a) { actions.push_back(a); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks_evicted, 3u);
  EXPECT_EQ(r->temps_removed, 1u);
  EXPECT_EQ(actions.size(), 4u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(tier_->Contains(Id(i)));
  struct stat st;
  EXPECT_EQ(::stat(stale.c_str(), &st), 0);
  EXPECT_TRUE(Usage().status().IsNotFound());  // dry runs write nothing
  EXPECT_FALSE(std::filesystem::exists(Root() + "/" + std::string(kPoolGcLockName)));  // nor lock
  // A dry run of a pool that does not exist fails and makes none.
  EXPECT_TRUE(CollectPoolGarbage(dir_.path() + "/nothing", GcOptions{.dry_run = true}).status().IsNotFound());
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/nothing"));
}

TEST_F(PoolGcTest, RemovesOnlyStaleTemporaries) {
  Fill(1);
  // kvtier's own temporaries, one past the grace and one within it, and two files that are not ours,
  // however old: one merely has ".tmp." in its name (never removed, as earlier builds did).
  const std::string stale = TempBeside(PathOf(0)), fresh = TempBeside(PathOf(0));
  const std::string foreign = Root() + "/v1/README";
  const std::string user_tmp = std::filesystem::path(PathOf(0)).parent_path().string() + "/thesis.tmp.1.2.3";
  std::ofstream(stale) << "old";
  std::ofstream(fresh) << "new";
  std::ofstream(foreign) << "not ours";
  std::ofstream(user_tmp) << "not ours either";
  SetAge(stale, 3600);
  SetAge(fresh, 10);
  SetAge(foreign, 86400);
  SetAge(user_tmp, 86400);
  auto r = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 1ull << 40, .grace = std::chrono::seconds(600)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->temps_removed, 1u);
  EXPECT_EQ(r->live_temps, 1u);
  EXPECT_EQ(r->chunks_evicted, 0u);
  struct stat st;
  EXPECT_NE(::stat(stale.c_str(), &st), 0);
  EXPECT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(::stat(foreign.c_str(), &st), 0);
  EXPECT_EQ(::stat(user_tmp.c_str(), &st), 0);
  EXPECT_EQ(r->skipped.foreign, 2u);
  EXPECT_TRUE(tier_->Contains(Id(0)));
}

// A chunk-named file whose size no chunk can have is corrupt: removed, never counted, so it never
// makes good chunks be evicted.
TEST_F(PoolGcTest, ImpossibleSizeIsCorruptAndNeverEvictsGoodChunks) {
  Fill(3);
  ASSERT_EQ(::truncate(PathOf(1).c_str(), 5000), 0);
  std::vector<GcAction> actions;
  auto r = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 2 * Stored()},
                              [&](const GcAction& a) { actions.push_back(a); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->corrupt_removed, 1u);
  EXPECT_EQ(r->chunks_scanned, 2u);
  EXPECT_EQ(r->chunks_evicted, 0u);
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].reason, GcReason::kCorrupt);
  EXPECT_EQ(actions[0].path, PathOf(1));
  EXPECT_FALSE(std::filesystem::exists(PathOf(1)));
  EXPECT_TRUE(tier_->Contains(Id(0)));
  EXPECT_TRUE(tier_->Contains(Id(2)));
}

TEST_F(PoolGcTest, OneGcAtATime) {
  Fill(1);
  Fd lock(::open((Root() + "/" + std::string(kPoolGcLockName)).c_str(), O_RDWR | O_CREAT, 0666));
  ASSERT_TRUE(lock.valid());
  ASSERT_EQ(::flock(lock.get(), LOCK_EX), 0);
  auto r = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 0});
  EXPECT_EQ(r.status().code(), Code::kBusy);
  EXPECT_TRUE(tier_->Contains(Id(0)));
}

TEST_F(PoolGcTest, RefusesMissingAndNewerPools) {
  EXPECT_TRUE(CollectPoolGarbage(dir_.path() + "/nothing", GcOptions{}).status().IsNotFound());
  Fill(1);
  std::ofstream(Root() + "/" + std::string(kPoolMetaName)) << EncodeDirMarker(PoolDirSpec(), kPoolFormatVersion + 1);
  EXPECT_EQ(CollectPoolGarbage(Root(), GcOptions{.max_bytes = 0}).status().code(), Code::kVersionMismatch);
  EXPECT_TRUE(tier_->Contains(Id(0)));  // an older gc never deletes a newer pool's chunks
}

// gc evicting everything while readers and writers work: every read is whole and right, or a miss.
TEST_F(PoolGcTest, ConcurrentReadersNeverSeeATornChunk) {
  constexpr size_t kKeys = 32;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> mismatches{0}, corrupt{0}, hits{0};
  auto work = [&](size_t seed) {
    std::vector<std::byte> out(Bytes());
    for (size_t n = 0; !stop.load(); ++n) {
      const size_t i = (seed * 7 + n * 13) % kKeys;
      if (n % 3 == 0) {
        auto data = PayloadFor(keys_[i], Bytes());
        (void)tier_->Put(Id(i), OnePiece(data).src());
        continue;
      }
      const Status s = tier_->Get(Id(i), OnePiece(out).dst());
      if (s.ok()) {
        hits++;
        if (out != PayloadFor(keys_[i], Bytes())) mismatches++;
      } else if (s.IsCorruption()) {
        corrupt++;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 3; ++t) threads.emplace_back(work, t);
  for (int round = 0; round < 30; ++round) {
    auto r = CollectPoolGarbage(Root(), GcOptions{.max_bytes = 8 * Stored()});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0u);
  EXPECT_EQ(corrupt.load(), 0u);
  // With writers stopped, one more pass must bring the pool within its bound.
  ASSERT_TRUE(CollectPoolGarbage(Root(), GcOptions{.max_bytes = 8 * Stored()}).ok());
  EXPECT_LE(PoolBytes(), 8 * Stored());
}

}  // namespace
}  // namespace kvtier::internal
