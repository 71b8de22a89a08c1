// The Store over mem:// + redis:// on real servers under faults: a master killed during loads (misses and
// retries, then the replica's promotion, 0 wrong bytes, the Store serving on) and a node restarted empty
// (misses for that node's chunks, the others served). Loads come from redis: the mem:// tier is small and
// a second batch evicts the first from it, and promote_on_load is off.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "tiers/object/object_names.h"
#include "tiers/object/object_tier.h"
#include "tiers/redis/router.h"
#include "redis_harness.h"
#include "store/store_fixture.h"

namespace kvtier::redis::testing {
namespace {

using kvtier::testing::StoreTestBase;

constexpr size_t kChunks = 24;  // the batch loaded from redis
constexpr size_t kFiller = 64;  // 8 KiB: twice the mem:// tier, evicts the batch from it

struct LoadCounts {
  uint64_t loaded = 0, not_loaded = 0, wrong_bytes = 0, errors = 0, victim_loaded = 0;
};

class RedisStore : public StoreTestBase {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
  }

  void Start(int masters, int replicas) {
    auto r = LocalRedis::Start(masters, replicas);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    redis_ = std::move(r).value();
    StoreOptions o;
    o.tiers = {"mem://?capacity=4KiB&page=64", redis_->url() + "?timeout_ms=2000&connect_timeout_ms=500"};
    o.promote_on_load = false;  // every load of the batch stays a redis read
    auto s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  // Saves the batch and the filler (each flushed to redis), and checks mem:// holds none of the batch.
  void SaveBatchAndEvict() {
    keys_ = Keys(kChunks, 1);
    ASSERT_TRUE(Save(*store_, keys_).ok());
    ASSERT_TRUE(store_->Flush().ok());
    ASSERT_EQ(store_->Stats().dropped_saves, 0u) << "the whole batch reached redis";
    // The filler only evicts (its chunks may be dropped for redis: mem:// let them go before the queue ran).
    ASSERT_TRUE(Save(*store_, Keys(kFiller, 2)).ok());
    ASSERT_TRUE(store_->Flush().ok());
    for (const auto& k : keys_) ASSERT_FALSE(store_->tier(0).Contains(ChunkId::Of(ns_, k))) << "still in mem://";
    for (const auto& k : keys_) ASSERT_TRUE(store_->tier(1).Contains(ChunkId::Of(ns_, k))) << "not in redis";
  }

  int SlotOf(const ChunkKey& k) const { return KeySlot(object::ChunkObjectName("", ChunkId::Of(ns_, k))); }

  // The batch's chunks whose slot `port` serves.
  std::set<size_t> ChunksOn(int port) const {
    std::set<size_t> on;
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (redis_->MasterOf(SlotOf(keys_[i]), redis_->ports()[0]) == port) on.insert(i);
    }
    return on;
  }

  // Loads `keys` (one Load call) and checks every chunk reported loaded byte by byte.
  void LoadChecked(std::span<const ChunkKey> keys, size_t first_index, LoadCounts& n) {
    std::vector<std::vector<std::byte>> out(keys.size(), std::vector<std::byte>(bytes_));
    std::vector<std::span<std::byte>> pieces(out.begin(), out.end());
    std::vector<ScatterList> dsts;
    for (const auto& p : pieces) dsts.emplace_back(&p, 1);
    auto r = store_->Load(ns_, keys, dsts);
    if (!r.ok()) {  // only InvalidArgument is documented, and these arguments are valid
      ++n.errors;
      ADD_FAILURE() << r.status().ToString();
      return;
    }
    if (*r > keys.size()) {
      ++n.errors;
      ADD_FAILURE() << "Load reported " << *r << " of " << keys.size();
      return;
    }
    for (size_t i = 0; i < *r; ++i) {
      n.wrong_bytes += out[i] == PayloadOf(keys[i]) ? 0 : 1;
      n.victim_loaded += victim_chunks_.count(first_index + i);
    }
    n.loaded += *r;
    n.not_loaded += keys.size() - *r;
  }

  // One round: the whole batch as one prompt, then every chunk on its own.
  void LoadRound(LoadCounts& n) {
    LoadChecked(keys_, 0, n);
    for (size_t i = 0; i < keys_.size(); ++i) LoadChecked(std::span(keys_).subspan(i, 1), i, n);
  }

  // Per chunk on its own: whether it loads (byte-checked into `n`).
  std::vector<bool> LoadEach(LoadCounts& n) {
    std::vector<bool> ok(keys_.size());
    for (size_t i = 0; i < keys_.size(); ++i) {
      const uint64_t before = n.loaded;
      LoadChecked(std::span(keys_).subspan(i, 1), i, n);
      ok[i] = n.loaded > before;
    }
    return ok;
  }

  // Waits (bounded) until every replica of `master` holds as many keys as it does.
  void WaitReplicated(int master) {
    for (int p : redis_->ports()) {
      auto role = redis_->Command(p, {"ROLE"});
      ASSERT_TRUE(role.ok());
      if (role->elements.size() < 3 || role->elements[0].str != "slave" || role->elements[2].integer != master) {
        continue;
      }
      bool same = false;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!same && std::chrono::steady_clock::now() < deadline) {
        auto a = redis_->Command(master, {"DBSIZE"}), b = redis_->Command(p, {"DBSIZE"});
        same = a.ok() && b.ok() && a->integer == b->integer;
        if (!same) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      ASSERT_TRUE(same) << "replica " << p << " of " << master << " did not catch up";
    }
  }

  // Polls (bounded) node `ask_port`'s slot map until `slot` has a master other than `old`; 0 if none came.
  int WaitNewMaster(int slot, int old, int ask_port, int timeout_s) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      const int m = redis_->MasterOf(slot, ask_port);
      if (m != 0 && m != old) return m;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }

  object::ObjectTierReport RedisReport() {
    auto* t = dynamic_cast<object::ObjectTier*>(&store_->tier(1));
    EXPECT_NE(t, nullptr);
    return t != nullptr ? t->Report() : object::ObjectTierReport{};
  }

  std::unique_ptr<LocalRedis> redis_;
  std::unique_ptr<Store> store_;
  std::vector<ChunkKey> keys_;
  std::set<size_t> victim_chunks_;  // chunks whose data is gone for good (none when a replica has them)
};

TEST_F(RedisStore, MasterKilledDuringLoadsFailsOverWithNoWrongBytes) {
  ASSERT_NO_FATAL_FAILURE(Start(3, 1));
  ASSERT_NO_FATAL_FAILURE(SaveBatchAndEvict());
  const int victim = redis_->MasterOf(SlotOf(keys_[0]), redis_->ports()[0]);
  ASSERT_NE(victim, 0);
  WaitReplicated(victim);
  {
    LoadCounts before;
    LoadRound(before);
    ASSERT_EQ(before.loaded, 2 * kChunks) << "every chunk loads before the kill";
    ASSERT_EQ(before.wrong_bytes, 0u);
  }
  const object::ObjectTierReport r0 = RedisReport();

  // A loader runs through the kill, the failover and after it.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0};
  LoadCounts during;
  std::thread loader([&] {
    while (!stop.load()) {
      LoadRound(during);
      rounds.fetch_add(1);
    }
  });
  auto wait_rounds = [&](uint64_t more) {
    const uint64_t target = rounds.load() + more;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (rounds.load() < target && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return rounds.load() >= target;
  };
  const bool ran_before = wait_rounds(1);
  redis_->Kill(victim);
  const bool ran_after_kill = wait_rounds(1);
  // Right after a kill the nodes still say cluster_state:ok (the node is not yet marked failed): wait
  // for the slot map of a live node to name another master, then for the cluster to settle.
  const int live = redis_->ports()[0] == victim ? redis_->ports()[1] : redis_->ports()[0];
  const int new_master = WaitNewMaster(SlotOf(keys_[0]), victim, live, 60);
  const bool promoted = new_master != 0 && redis_->WaitClusterOk(60);
  const bool ran_after_ok = wait_rounds(2);
  stop = true;
  loader.join();
  std::cout << "[store] during the failover: " << during.loaded << " loaded, " << during.not_loaded
            << " not loaded in " << rounds.load() << " rounds" << std::endl;
  EXPECT_TRUE(ran_before && ran_after_kill && ran_after_ok) << "the loader stalled";
  EXPECT_EQ(during.wrong_bytes, 0u);
  EXPECT_EQ(during.errors, 0u);
  ASSERT_TRUE(promoted) << "no failover within 60 s";
  EXPECT_EQ(redis_->MasterOf(SlotOf(keys_[0]), new_master), new_master) << "the promoted replica serves the slot";

  // Bounded: connections to the new master may still be reset once.
  LoadCounts after;
  std::vector<bool> ok;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    ok = LoadEach(after);
  } while (std::count(ok.begin(), ok.end(), true) != static_cast<long>(kChunks) &&
           std::chrono::steady_clock::now() < deadline);
  for (size_t i = 0; i < kChunks; ++i) EXPECT_TRUE(ok[i]) << "chunk " << i << " after the promotion";
  LoadCounts whole;
  LoadChecked(keys_, 0, whole);
  EXPECT_EQ(whole.loaded, kChunks) << "the whole prompt loads again";
  EXPECT_EQ(after.wrong_bytes + whole.wrong_bytes, 0u);
  EXPECT_EQ(after.errors + whole.errors, 0u);

  // The dead node was seen and counted: the first request to it after the kill cannot succeed.
  const object::ObjectTierReport r1 = RedisReport();
  EXPECT_GT(r1.client_stats.errors + r1.client_stats.retries + r1.tier_retries + r1.gave_up,
            r0.client_stats.errors + r0.client_stats.retries + r0.tier_retries + r0.gave_up);
  const StoreStats st = store_->Stats();
  EXPECT_EQ(st.tiers[1].corrupt, 0u);
  EXPECT_GE(st.load_chunks, 2 * kChunks + during.loaded + after.loaded + whole.loaded);
  // And the Store saves on: a new chunk reaches the cluster.
  const auto extra = Keys(1, 3);
  ASSERT_TRUE(Save(*store_, extra).ok());
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_TRUE(store_->tier(1).Contains(ChunkId::Of(ns_, extra[0])));
}

TEST_F(RedisStore, NodeRestartedEmptyMissesItsChunksAndServesTheOthers) {
  ASSERT_NO_FATAL_FAILURE(Start(3, 0));
  ASSERT_NO_FATAL_FAILURE(SaveBatchAndEvict());
  const int victim = redis_->MasterOf(SlotOf(keys_[0]), redis_->ports()[0]);
  ASSERT_NE(victim, 0);
  victim_chunks_ = ChunksOn(victim);
  ASSERT_FALSE(victim_chunks_.empty());
  ASSERT_LT(victim_chunks_.size(), kChunks) << "the other nodes hold some of the batch";

  redis_->Kill(victim);
  LoadCounts down;
  LoadRound(down);
  ASSERT_TRUE(redis_->Restart(victim).ok());
  ASSERT_TRUE(redis_->WaitClusterOk(60));

  // Bounded: until every chunk of the live nodes loads again (connections may be reset once).
  LoadCounts after;
  std::vector<bool> ok;
  auto others_ok = [&] {
    for (size_t i = 0; i < kChunks; ++i) {
      if (!victim_chunks_.count(i) && !ok[i]) return false;
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    ok = LoadEach(after);
  } while (!others_ok() && std::chrono::steady_clock::now() < deadline);
  const StoreStats s0 = store_->Stats();
  ok = LoadEach(after);  // the settled state, counted on its own
  const StoreStats s1 = store_->Stats();
  for (size_t i = 0; i < kChunks; ++i) {
    EXPECT_EQ(ok[i], !victim_chunks_.count(i)) << "chunk " << i << (victim_chunks_.count(i) ? " (on the restarted node)" : "");
  }
  EXPECT_EQ(down.wrong_bytes + after.wrong_bytes, 0u);
  EXPECT_EQ(down.errors + after.errors, 0u);
  EXPECT_EQ(down.victim_loaded + after.victim_loaded, 0u) << "a lost chunk never loads";
  EXPECT_EQ(s1.load_chunks - s0.load_chunks, kChunks - victim_chunks_.size());

  // The whole prompt loads up to the first lost chunk; Lookup counts the lost ones as misses.
  LoadCounts whole;
  LoadChecked(keys_, 0, whole);
  EXPECT_EQ(whole.loaded, *victim_chunks_.begin());
  const StoreStats l0 = store_->Stats();
  for (size_t i = 0; i < kChunks; ++i) {
    EXPECT_EQ(store_->Lookup(ns_, std::span(keys_).subspan(i, 1)), victim_chunks_.count(i) ? 0u : 1u);
  }
  const StoreStats l1 = store_->Stats();
  EXPECT_EQ(l1.lookup_chunks_missed - l0.lookup_chunks_missed, victim_chunks_.size());
  EXPECT_EQ(l1.lookup_chunks_hit - l0.lookup_chunks_hit, kChunks - victim_chunks_.size());
}

}  // namespace
}  // namespace kvtier::redis::testing
