// rados:// on a real single-host cluster (mon, mgr, one OSD; started once for this binary) under faults:
// wrong credentials and a missing pool are one clear error; a pool over its quota fails puts softly
// (NoSpace, reads go on); the OSD stopped during loads gives misses and retries, never wrong bytes, the
// Store serves on from mem://, and after the OSD is back every chunk loads again.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "tiers/ceph/ceph_harness.h"
#include "tiers/ceph/fault_cluster.h"
#include "tiers/object/object_tier.h"
#include "tiers/rados/rados_client.h"
#include "tiers/rados/rados_reference.h"
#include "store/store_fixture.h"

namespace kvtier::ceph_testing {
namespace {

using kvtier::testing::StoreTestBase;

}  // namespace

LocalCeph* g_ceph = nullptr;

namespace {

// mon, mgr, OSD and radosgw: this binary's rados and s3 tests.
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new ClusterEnvironment("--no-fs", &g_ceph));

class RadosFault : public StoreTestBase {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
    ASSERT_NE(g_ceph, nullptr) << "the cluster did not start (see above)";
  }
  std::string Url(const std::string& pool_ns, const std::string& extra = "") const {
    return "rados://" + pool_ns + "?conf=" + g_ceph->conf() + extra;
  }
};

TEST_F(RadosFault, WrongCredentialsAreOneClearError) {
  // The cluster runs without cephx; a client that insists on cephx with a key the cluster does not know
  // is refused at connect.
  std::ifstream in(g_ceph->conf());
  std::stringstream conf;
  conf << in.rdbuf();
  std::string text = conf.str();
  const std::string none = "auth client required = none";
  const std::string cephx = "auth client required = cephx\nkeyring = " + g_ceph->dir() + "/bad.keyring";
  size_t replaced = 0;
  for (size_t at = text.find(none); at != std::string::npos; at = text.find(none, at + cephx.size())) {
    text.replace(at, none.size(), cephx);
    ++replaced;
  }
  ASSERT_GT(replaced, 0u) << "the cluster's ceph.conf no longer says '" << none << "'";
  const std::string bad_conf = g_ceph->dir() + "/bad.conf";
  std::ofstream(bad_conf) << text;
  std::ofstream(g_ceph->dir() + "/bad.keyring") << "[client.admin]\n\tkey = AQBrFGhnAAAAABAAzxkSpDVz0n4kxSRiIU5Bwg==\n";
  auto t = OpenTier("rados://kvtier?conf=" + bad_conf + "&connect_timeout_ms=5000");
  ASSERT_FALSE(t.ok());
  std::cout << "[rados] wrong credentials: " << t.status().ToString() << std::endl;
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  EXPECT_NE(t.status().message().find("refused client.admin"), std::string::npos) << t.status().ToString();
}

TEST_F(RadosFault, MissingPoolIsOneClearError) {
  auto t = OpenTier(Url("no_such_pool"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("no pool 'no_such_pool'"), std::string::npos) << t.status().ToString();
}

// The bench's librados reference (rados/rados_reference.h): writes with 5 in flight, reads back in
// windows of 5 (23 objects: the last window short), checks every object and removes them all; objects
// smaller than the index tag too.
TEST_F(RadosFault, PlainRadosReferenceWritesAndReadsItsObjectsAndRemovesThem) {
  auto url = TierUrl::Parse(Url("kvtier/refns"));
  ASSERT_TRUE(url.ok());
  auto r = rados::PlainRadosReference(*url, 100'000, 23, 5);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectWholeRoundTrip(*r, 23, 100'000);
  auto tiny = rados::PlainRadosReference(*url, 5, 3, 8);
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  EXPECT_EQ(tiny->write.objects, 3u);
  EXPECT_EQ(tiny->read.objects, 3u);
  EXPECT_EQ(tiny->read.errors, 0u);
  auto options = rados::ParseRadosOptions(*url);
  ASSERT_TRUE(options.ok());
  auto client = rados::OpenRadosClient(*options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ExpectNoObjectsLeft(**client);
  auto missing = rados::PlainRadosReference(*TierUrl::Parse(Url("no_such_pool")), 100, 2, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument) << missing.status().ToString();
}

TEST_F(RadosFault, PoolOverQuotaFailsPutsSoftlyAndReadsGoOn) {
  ASSERT_TRUE(g_ceph->Ceph("osd pool create small 8 8").ok());
  ASSERT_TRUE(g_ceph->Ceph("osd pool set-quota small max_bytes 1048576").ok());
  auto t = OpenTier(Url("small", "&retries=1&timeout_ms=5000"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<std::byte> payload(256 << 10, std::byte{0x5a});
  const std::span<const std::byte> piece(payload);
  // The monitor marks the pool full a few seconds after its usage passes the quota (the OSD reports
  // usage periodically): put until a put fails, bounded.
  Status failed;
  std::vector<ChunkId> stored;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (uint32_t i = 0; failed.ok() && std::chrono::steady_clock::now() < deadline; ++i) {
    const ChunkId id = ChunkId::Of(ns_, Keys(1, 1000 + i)[0]);
    failed = (*t)->Put(id, GatherList(&piece, 1));
    if (failed.ok()) stored.push_back(id);
    if (failed.ok() && stored.size() > 4) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::cout << "[rados] pool over quota after " << stored.size() << " puts: " << failed.ToString() << std::endl;
  ASSERT_FALSE(failed.ok()) << "the pool never filled";
  EXPECT_EQ(failed.code(), Code::kNoSpace) << failed.ToString();
  // Reads of what is there go on.
  std::vector<std::byte> out(payload.size());
  const std::span<std::byte> dst(out);
  ASSERT_TRUE((*t)->Get(stored.front(), ScatterList(&dst, 1)).ok());
  EXPECT_TRUE(out == payload);
  EXPECT_TRUE(g_ceph->Ceph("osd pool set-quota small max_bytes 0").ok());
}

TEST_F(RadosFault, OsdStoppedDuringLoadsGivesMissesNotWrongBytesAndStoreServesOn) {
  StoreOptions o;
  o.tiers = {"mem://?capacity=4KiB&page=64", Url("kvtier/osdstop", "&timeout_ms=2000&retries=1&retry_budget_ms=3000")};
  o.promote_on_load = false;  // loads of the batch stay rados reads
  auto opened = Store::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> store = std::move(opened).value();
  const auto batch = Keys(16, 1);
  ASSERT_TRUE(Save(*store, batch).ok());
  ASSERT_TRUE(store->Flush().ok());
  ASSERT_TRUE(Save(*store, Keys(64, 2)).ok());  // 8 KiB: evicts the batch from the 4 KiB mem:// tier
  ASSERT_TRUE(store->Flush().ok());
  for (const auto& k : batch) ASSERT_FALSE(store->tier(0).Contains(ChunkId::Of(ns_, k)));
  auto loaded = Load(*store, batch);  // checks every loaded byte
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(*loaded, batch.size());

  // Loads run while the OSD stops and after.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0}, chunks_loaded{0};
  std::thread loader([&] {
    while (!stop.load()) {
      auto n = Load(*store, batch);  // one prompt: one parallel read; EXPECTs the bytes of what loads
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (n.ok()) chunks_loaded += *n;
      ++rounds;
    }
  });
  while (rounds.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  ASSERT_TRUE(g_ceph->Run("osd-stop").ok());
  std::cout << "[rados] osd stopped at " << since() << " s" << std::endl;
  const uint64_t at_stop = rounds.load();
  while (rounds.load() < at_stop + 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // The Store serves on from mem://: a chunk saved now loads.
  const auto fresh = Keys(2, 3);
  ASSERT_TRUE(Save(*store, fresh).ok());
  auto fresh_loaded = Load(*store, fresh);
  ASSERT_TRUE(fresh_loaded.ok());
  EXPECT_EQ(*fresh_loaded, fresh.size()) << "mem:// serves while the OSD is down";
  const uint64_t before_down_round = chunks_loaded.load();
  const uint64_t r0 = rounds.load();
  while (rounds.load() < r0 + 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(chunks_loaded.load(), before_down_round) << "no chunk loads from a stopped OSD";
  stop = true;
  loader.join();
  auto* tier = dynamic_cast<object::ObjectTier*>(&store->tier(1));
  ASSERT_NE(tier, nullptr);
  const object::ObjectTierReport down = tier->Report();
  std::cout << "[rados] OSD down: " << rounds.load() << " rounds, tier retries " << down.tier_retries << ", gave up "
            << down.gave_up << ", client errors " << down.client_stats.errors << std::endl;
  EXPECT_GT(down.tier_retries, 0u);
  EXPECT_GT(down.gave_up, 0u);

  std::cout << "[rados] loader joined at " << since() << " s" << std::endl;
  ASSERT_TRUE(g_ceph->Run("osd-start").ok());
  std::cout << "[rados] osd started at " << since() << " s" << std::endl;
  // Bounded: the first ops after the restart may still time out while PGs peer.
  size_t n = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (n != batch.size() && std::chrono::steady_clock::now() < deadline) {
    auto again = Load(*store, batch);
    ASSERT_TRUE(again.ok());
    n = *again;
  }
  EXPECT_EQ(n, batch.size()) << "every chunk loads once the OSD is back";
  std::cout << "[rados] all loaded again at " << since() << " s" << std::endl;
  EXPECT_EQ(store->Stats().tiers[1].corrupt, 0u);
}

}  // namespace
}  // namespace kvtier::ceph_testing
