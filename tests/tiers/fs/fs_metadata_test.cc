// fs:// metadata round trips: a Load after a Lookup stats no chunk again (a Store plans its last tier
// without asking it), ContainsMany answers as one Contains per chunk would, and every round trip is
// counted in TierStats::metadata_ops.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tiers/fs/counting_fs.h"
#include "tiers/fs/fs_test_support.h"
#include "tiers/fs/fs_tier.h"
#include "kvtier/store.h"

namespace kvtier::internal {
namespace {

using fstest::OnePiece;
using fstest::PayloadFor;

// A filesystem whose stats take `delay` each on the clock it keeps (the clock the tier times its stats
// with; it moves only when a stat is made, so the tier's choice never depends on this host's speed);
// after StallNextStat, the next one takes that much more (a thread that waited for a CPU on a busy
// host). With `sleep`, each stat also really sleeps `delay`, so threads started for a batch overlap.
class SlowStatFileSystem : public CountingFileSystem {
 public:
  SlowStatFileSystem(std::shared_ptr<FileSystem> inner, std::chrono::microseconds delay, bool sleep)
      : CountingFileSystem(std::move(inner)), delay_(delay), sleep_(sleep) {}
  void StallNextStat(std::chrono::microseconds stall) { stall_us_ = stall.count(); }
  std::chrono::steady_clock::time_point Now() const {
    return std::chrono::steady_clock::time_point(std::chrono::microseconds(clock_us_.load()));
  }
  Result<FileStat> Stat(std::string_view rel) override {
    if (sleep_) std::this_thread::sleep_for(delay_);
    clock_us_ += delay_.count() + stall_us_.exchange(0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads_.insert(std::this_thread::get_id());
    }
    return CountingFileSystem::Stat(rel);
  }
  size_t threads_seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_.size();
  }

 private:
  const std::chrono::microseconds delay_;
  const bool sleep_;
  std::atomic<int64_t> stall_us_{0};
  std::atomic<int64_t> clock_us_{0};
  std::mutex mu_;
  std::set<std::thread::id> threads_;
};

class FsMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.ok()); }

  // An fs:// tier over a filesystem whose calls this test counts.
  // Every Stat takes `stat_delay` on the tier's stat clock (1 us: a local disk; 2 ms: a network
  // filesystem's round trip, then also really slept).
  std::unique_ptr<Tier> Open(std::shared_ptr<CountingFileSystem>* counted, const std::string& params = "",
                             std::chrono::microseconds stat_delay = std::chrono::microseconds(1)) {
    auto posix = OpenPosixFileSystem(dir_.path() + "/pool", PosixFsOptions{.create = true});
    EXPECT_TRUE(posix.ok());
    auto slow = std::make_shared<SlowStatFileSystem>(*posix, stat_delay, stat_delay.count() >= 1000);
    *counted = slow;
    auto url = TierUrl::Parse("fs://" + dir_.path() + "/pool" + params);
    EXPECT_TRUE(url.ok());
    auto o = ParseFsTierOptions(*url);
    EXPECT_TRUE(o.ok());
    o->fs = *counted;
    o->stat_clock = [slow] { return slow->Now(); };
    auto t = OpenFsTierWithOptions(*o, url->ToString());
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  ChunkId Id(size_t i) const { return ChunkId::Of(ns_, keys_[i]); }
  size_t Bytes() const { return ns_.layout().BytesPerChunk(); }
  void Fill(Tier& t, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      auto data = PayloadFor(keys_[i], Bytes());
      ASSERT_TRUE(t.Put(Id(i), OnePiece(data).src()).ok());
    }
  }

  fstest::TempDir dir_;
  Namespace ns_ = fstest::TestNamespace();
  std::vector<ChunkKey> keys_ = fstest::TestKeys(ns_, 8);
};

TEST_F(FsMetadataTest, LoadAfterLookupStatsEachChunkAtMostOnce) {
  std::shared_ptr<CountingFileSystem> counted;
  {
    auto writer = Open(&counted);
    ASSERT_NE(writer, nullptr);
    Fill(*writer, 6);
  }
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(Open(&counted));
  ASSERT_NE(tiers[0], nullptr);
  auto store = Store::Open(std::move(tiers), StoreOptions{});
  ASSERT_TRUE(store.ok());
  const std::span<const ChunkKey> keys(keys_.data(), 6);
  const uint64_t stats0 = counted->stats(), opens0 = counted->opens();
  const uint64_t ops0 = (*store)->Stats().tiers[0].metadata_ops;
  EXPECT_EQ((*store)->Lookup(ns_, keys_), 6u);  // 7th and 8th absent: the prefix is 6
  const uint64_t lookup_stats = counted->stats() - stats0;
  EXPECT_LE(lookup_stats, keys_.size());
  std::vector<std::vector<std::byte>> out(6, std::vector<std::byte>(Bytes()));
  std::vector<std::span<std::byte>> spans;
  for (auto& o : out) spans.emplace_back(o);
  std::vector<ScatterList> dsts;
  for (auto& s : spans) dsts.emplace_back(&s, 1);
  auto n = (*store)->Load(ns_, keys, dsts);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_TRUE(out[i] == PayloadFor(keys_[i], Bytes())) << i;
  EXPECT_EQ(counted->stats() - stats0, lookup_stats) << "Load stat'd chunks that Lookup had just found";
  EXPECT_EQ(counted->opens() - opens0, 6u);  // one open (and its fstat) per chunk read
  // The tier's own count covers every round trip: the stats, then an open and an fstat per chunk.
  const uint64_t ops = (*store)->Stats().tiers[0].metadata_ops - ops0;
  EXPECT_GE(ops, lookup_stats + 2 * 6);
}

TEST_F(FsMetadataTest, ContainsManyAgreesWithContains) {
  std::shared_ptr<CountingFileSystem> counted;
  auto tier = Open(&counted, "?neg_ttl_ms=0&pos_ttl_ms=0");
  ASSERT_NE(tier, nullptr);
  for (size_t i : {0, 2, 3, 7}) {
    auto data = PayloadFor(keys_[i], Bytes());
    ASSERT_TRUE(tier->Put(Id(i), OnePiece(data).src()).ok());
  }
  std::vector<ChunkId> ids;
  for (size_t r = 0; r < 3; ++r) {  // 24 ids: enough for the override to use its threads
    for (size_t i = 0; i < keys_.size(); ++i) ids.push_back(Id(i));
  }
  std::unique_ptr<bool[]> batched(new bool[ids.size()]()), looped(new bool[ids.size()]());
  tier->ContainsMany(ids, {batched.get(), ids.size()});
  tier->Tier::ContainsMany(ids, {looped.get(), ids.size()});  // the interface's default: one Contains each
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t k = i % keys_.size();
    const bool stored = k == 0 || k == 2 || k == 3 || k == 7;
    EXPECT_EQ(batched[i], stored) << i;
    EXPECT_EQ(looped[i], stored) << i;
  }
  EXPECT_GE(counted->stats(), 2 * ids.size());  // nothing cached here: every answer was a stat
}

// Stats that take a round trip (here a 2 ms sleep each) move the batch onto several threads; the
// answers are the same as one Contains per chunk.
TEST_F(FsMetadataTest, SlowStatsAreSpreadOverThreadsWithTheSameAnswers) {
  std::shared_ptr<CountingFileSystem> counted;
  auto tier = Open(&counted, "?neg_ttl_ms=0&pos_ttl_ms=0", std::chrono::microseconds(2000));
  ASSERT_NE(tier, nullptr);
  for (size_t i : {1, 4, 5}) {
    auto data = PayloadFor(keys_[i], Bytes());
    ASSERT_TRUE(tier->Put(Id(i), OnePiece(data).src()).ok());
  }
  std::vector<ChunkId> ids;
  for (size_t r = 0; r < 8; ++r) {
    for (size_t i = 0; i < keys_.size(); ++i) ids.push_back(Id(i));
  }
  std::unique_ptr<bool[]> present(new bool[ids.size()]());
  const uint64_t stats0 = counted->stats();
  tier->ContainsMany(ids, {present.get(), ids.size()});
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t k = i % keys_.size();
    EXPECT_EQ(present[i], k == 1 || k == 4 || k == 5) << i;
  }
  EXPECT_EQ(counted->stats() - stats0, ids.size());
  EXPECT_GT(static_cast<SlowStatFileSystem&>(*counted).threads_seen(), 1u);
}

// Fast stats (a local disk) stay on the caller's thread: no thread is started for them.
TEST_F(FsMetadataTest, FastStatsStayOnTheCallersThread) {
  std::shared_ptr<CountingFileSystem> counted;
  auto tier = Open(&counted, "?neg_ttl_ms=0&pos_ttl_ms=0");
  ASSERT_NE(tier, nullptr);
  std::vector<ChunkId> ids;
  for (size_t i = 0; i < keys_.size(); ++i) ids.push_back(Id(i));
  std::unique_ptr<bool[]> present(new bool[ids.size()]());
  tier->ContainsMany(ids, {present.get(), ids.size()});
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_FALSE(present[i]);
  EXPECT_EQ(static_cast<SlowStatFileSystem&>(*counted).threads_seen(), 1u);
}

// One stat that stalls (a busy host's preemption, here a 20 ms sleep) among fast ones is no network:
// the batch stays on the caller's thread. (Deciding by the mean fanned it out onto eight threads.)
TEST_F(FsMetadataTest, OneStalledStatAmongFastOnesStartsNoThread) {
  std::shared_ptr<CountingFileSystem> counted;
  auto tier = Open(&counted, "?neg_ttl_ms=0&pos_ttl_ms=0");
  ASSERT_NE(tier, nullptr);
  auto data = PayloadFor(keys_[3], Bytes());
  ASSERT_TRUE(tier->Put(Id(3), OnePiece(data).src()).ok());
  static_cast<SlowStatFileSystem&>(*counted).StallNextStat(std::chrono::milliseconds(20));
  std::vector<ChunkId> ids;
  for (size_t r = 0; r < 8; ++r) {
    for (size_t i = 0; i < keys_.size(); ++i) ids.push_back(Id(i));
  }
  std::unique_ptr<bool[]> present(new bool[ids.size()]());
  tier->ContainsMany(ids, {present.get(), ids.size()});
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(present[i], i % keys_.size() == 3) << i;
  EXPECT_EQ(static_cast<SlowStatFileSystem&>(*counted).threads_seen(), 1u);
}

}  // namespace
}  // namespace kvtier::internal
