// RedisClient against a real single instance and a real 3-master cluster: byte-exact round trips,
// misses, Delete/Exists/List, slot routing that agrees with the server, and slot migration (ASK while a
// slot migrates, MOVED once it has moved) with 0 wrong bytes.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tiers/redis/plain_reference.h"
#include "redis_harness.h"

namespace kvtier::redis::testing {
namespace {

constexpr size_t kMiB = 1 << 20;

std::unique_ptr<object::ObjectClient> Open(const std::string& url) {
  auto u = TierUrl::Parse(url);
  EXPECT_TRUE(u.ok()) << u.status().ToString();
  auto c = OpenRedisClient(*u, TierOpenOptions{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Reads `names` in one batch; returns how many objects came back wrong (missing, failed, other bytes).
size_t WrongObjects(object::ObjectClient& c, const std::vector<std::string>& names,
                    const std::vector<std::vector<std::byte>>& want) {
  std::vector<std::vector<std::byte>> got(names.size());
  std::vector<object::ObjectRead> ops(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    got[i].resize(want[i].size());
    ops[i].name = names[i];
    ops[i].dst = got[i];
  }
  c.GetMany(ops);
  size_t wrong = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const bool good = ops[i].status.ok() && ops[i].bytes == want[i].size() && got[i] == want[i];
    if (!good) ADD_FAILURE() << names[i] << ": " << ops[i].status.ToString();
    wrong += good ? 0 : 1;
  }
  return wrong;
}

class RedisTopology : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {}
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
    auto r = LocalRedis::Start(GetParam(), 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    redis_ = std::move(r).value();
    client_ = Open(redis_->url());
    ASSERT_NE(client_, nullptr);
  }
  void TearDown() override {
    client_.reset();
    redis_.reset();
  }
  std::unique_ptr<LocalRedis> redis_;
  std::unique_ptr<object::ObjectClient> client_;
};

TEST_P(RedisTopology, RoundTripLargeObjectsAcrossShards) {
  std::vector<std::string> names;
  std::vector<std::vector<std::byte>> data;
  std::set<int> slots;
  for (int i = 0; i < 8; ++i) {
    names.push_back("rt/obj-" + std::to_string(i));
    data.push_back(Pattern(i < 6 ? 2 * kMiB : 32 * kMiB + 7, i));
    slots.insert(KeySlot(names.back()) * 3 / kSlotCount);  // the thirds of the slot space (3 masters)
  }
  ASSERT_GE(slots.size(), 2u) << "the names must spread over shards";
  // Placement names the shard: one for every name on a single instance, one per third on 3 masters.
  std::map<int, std::set<uint64_t>> placed;  // third of the slot space -> placements seen
  std::set<uint64_t> all;
  for (const std::string& n : names) {
    const uint64_t p = client_->Placement(n);
    EXPECT_NE(p, 0u) << n;
    placed[KeySlot(n) * 3 / kSlotCount].insert(p);
    all.insert(p);
  }
  for (const auto& [third, ps] : placed) EXPECT_EQ(ps.size(), 1u) << "third " << third;
  EXPECT_EQ(all.size(), GetParam() == 1 ? 1u : slots.size());
  std::vector<std::span<const std::byte>> pieces;
  for (auto& d : data) pieces.emplace_back(d);
  // Each object in two pieces: the client sends them as one value.
  std::vector<std::array<std::span<const std::byte>, 2>> split(names.size());
  std::vector<object::ObjectWrite> writes(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    split[i] = {pieces[i].subspan(0, 1000), pieces[i].subspan(1000)};
    writes[i].name = names[i];
    writes[i].data = GatherList(split[i]);
  }
  client_->PutMany(writes);
  for (auto& w : writes) ASSERT_TRUE(w.status.ok()) << w.status.ToString();
  EXPECT_EQ(WrongObjects(*client_, names, data), 0u);
  EXPECT_GE(client_->Stats().requests, 2 * names.size());
  std::cout << client_->Describe() << std::endl;
}

TEST_P(RedisTopology, MissesAndTooSmallBuffers) {
  std::vector<std::byte> buf(100);
  object::ObjectRead miss{"no/such/object", buf, 0, {}};
  client_->GetMany(std::span(&miss, 1));
  EXPECT_TRUE(miss.status.IsNotFound()) << miss.status.ToString();

  ASSERT_TRUE(PutOne(*client_, "big", Pattern(4096, 1)).ok());
  std::vector<std::byte> small(100, std::byte{0x5a});
  object::ObjectRead r{"big", small, 0, {}};
  client_->GetMany(std::span(&r, 1));
  EXPECT_EQ(r.status.code(), Code::kInvalidArgument);
  EXPECT_EQ(r.bytes, 4096u);
  EXPECT_EQ(small, std::vector<std::byte>(100, std::byte{0x5a})) << "nothing copied";
}

// redis:// through the tier registry: an ObjectTier (framing, verification) over this client.
TEST_P(RedisTopology, TierThroughRegistry) {
  auto tier = OpenTier(redis_->url() + "?prefix=t1/&replica_reads=1&timeout_ms=5000");
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  auto id_of = [](int i) {
    ChunkId id;
    id.ns[0] = 7;
    id.key.bytes[0] = static_cast<uint8_t>(i);
    id.layout_fingerprint = 0x5eed;
    return id;
  };
  std::vector<std::byte> payload = Pattern(3 * kMiB + 5, 42);
  std::vector<std::byte> back(payload.size());
  const std::span<const std::byte> in(payload);
  const std::span<std::byte> out(back);
  for (int i = 0; i < 6; ++i) {
    const ChunkId id = id_of(i);
    ASSERT_TRUE((*tier)->Put(id, GatherList(&in, 1)).ok());
    ASSERT_TRUE((*tier)->Get(id, ScatterList(&out, 1)).ok());
    EXPECT_EQ(back, payload);
  }
  EXPECT_TRUE((*tier)->Get(id_of(200), ScatterList(&out, 1)).IsNotFound());
  int listed = 0;
  ASSERT_TRUE((*tier)->List([&](const ChunkInfo&) { return ++listed > 0; }).ok());
  EXPECT_EQ(listed, 6);
  EXPECT_FALSE(OpenTier(redis_->url() + "?no_such_option=1").ok());
}

TEST_P(RedisTopology, DeleteExistsList) {
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(PutOne(*client_, "list/a*" + std::to_string(i), Pattern(100 + i, i)).ok());
  }
  ASSERT_TRUE(PutOne(*client_, "other/x", Pattern(10, 1)).ok());
  ASSERT_TRUE(PutOne(*client_, "list/b", Pattern(10, 1)).ok());  // not matched by "list/a*"
  std::map<std::string, uint64_t> seen;
  ASSERT_TRUE(client_->List("list/a*", [&](const object::ObjectInfo& info) {
    seen[info.name] = info.bytes;
    return true;
  }).ok());
  ASSERT_EQ(seen.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(seen["list/a*" + std::to_string(i)], 100u + i);

  auto e = client_->Exists("list/a*3");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(*e);
  ASSERT_TRUE(client_->Delete("list/a*3").ok());
  ASSERT_TRUE(client_->Delete("list/a*3").ok()) << "deleting a missing object is OK";
  e = client_->Exists("list/a*3");
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(*e);
  int n = 0;
  ASSERT_TRUE(client_->List("list/", [&](const object::ObjectInfo&) { return ++n < 5; }).ok());
  EXPECT_EQ(n, 5) << "List stops when fn returns false";
}

TEST_P(RedisTopology, PlainHiredisReferenceWritesAndReadsItsValuesAndRemovesThem) {
  auto url = TierUrl::Parse(redis_->url());
  ASSERT_TRUE(url.ok());
  // Pipelined: 5 SETs in flight over 2 connections per master, 4 GETs over 1 per master.
  auto r = PlainHiredisReference(*url, 100'000, 23, PipelineShape{5, 2}, PipelineShape{4, 1});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->write.values, 23u);
  EXPECT_EQ(r->write.bytes, 23u * 100'000);
  EXPECT_EQ(r->write.errors, 0u);
  EXPECT_EQ(r->read.values, 23u);
  EXPECT_EQ(r->read.bytes, 23u * 100'000);
  EXPECT_EQ(r->read.errors, 0u);
  for (int port : redis_->ports()) {
    auto keys = redis_->Command(port, {"DBSIZE"});
    ASSERT_TRUE(keys.ok());
    EXPECT_EQ(keys->integer, 0) << "port " << port;
  }
}

INSTANTIATE_TEST_SUITE_P(Redis, RedisTopology, ::testing::Values(1, 3),
                         [](const auto& info) { return info.param == 1 ? "Single" : "Cluster3"; });

class RedisCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
    auto r = LocalRedis::Start(3, 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    redis_ = std::move(r).value();
    // The redirection counts below assume the map is reloaded only after a redirection, never by age
    // (slow runs, e.g. under TSan, take longer than the default age).
    auto u = TierUrl::Parse(redis_->url());
    ASSERT_TRUE(u.ok());
    auto opts = ParseRedisOptions(*u);
    ASSERT_TRUE(opts.ok()) << opts.status().ToString();
    opts->map_max_age = std::chrono::hours(1);
    auto c = OpenRedisClient(*opts);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
  }
  std::string NodeId(int port) {
    auto r = redis_->Command(port, {"CLUSTER", "MYID"});
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->str : "";
  }
  std::unique_ptr<LocalRedis> redis_;
  std::unique_ptr<object::ObjectClient> client_;
};

TEST_F(RedisCluster, KeySlotMatchesServer) {
  const int port = redis_->ports()[0];
  std::vector<std::string> keys = {"", "{", "}", "{}", "{}x", "a{b}c", "a{}{b}", "{{b}}", "x{y", "x}y{z}"};
  for (int i = 0; i < 1500; ++i) {
    auto bytes = Pattern(1 + i % 40, i);
    std::string k(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (i % 3 == 0) k = "kvtier:1:ns:" + std::to_string(i) + "{" + std::to_string(i % 7) + "}";
    keys.push_back(k);
  }
  int checked = 0;
  for (const std::string& k : keys) {
    auto r = redis_->Command(port, {"CLUSTER", "KEYSLOT", k});
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->type, ReplyNode::Type::kInteger);
    EXPECT_EQ(KeySlot(k), r->integer) << "key of " << k.size() << " bytes";
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(keys.size()));
}

// Moves one slot from its master to another with the SETSLOT/MIGRATE sequence, reading every object of
// the slot after each step: ASK while it migrates, MOVED once it has moved, 0 wrong bytes.
TEST_F(RedisCluster, SlotMigrationAskAndMoved) {
  std::vector<std::string> names;
  std::vector<std::vector<std::byte>> data;
  for (int i = 0; i < 12; ++i) {
    names.push_back("mig/{tag}/" + std::to_string(i));
    data.push_back(Pattern(2 * kMiB + i, 100 + i));
    ASSERT_TRUE(PutOne(*client_, names.back(), data.back()).ok());
  }
  const int slot = KeySlot(names[0]);
  const int src = redis_->MasterOf(slot, redis_->ports()[0]);
  ASSERT_NE(src, 0);
  int dst = 0;
  for (int p : redis_->ports()) dst = p != src ? p : dst;
  const std::string src_id = NodeId(src), dst_id = NodeId(dst);
  const std::string s = std::to_string(slot);
  ASSERT_TRUE(redis_->Command(dst, {"CLUSTER", "SETSLOT", s, "IMPORTING", src_id}).ok());
  ASSERT_TRUE(redis_->Command(src, {"CLUSTER", "SETSLOT", s, "MIGRATING", dst_id}).ok());
  EXPECT_EQ(WrongObjects(*client_, names, data), 0u);

  const uint64_t retries0 = client_->Stats().retries;
  for (int i = 0; i < 12; i += 4) {  // a few keys at a time, reading everything in between
    std::vector<std::string> mig = {"MIGRATE", "127.0.0.1", std::to_string(dst), "", "0", "5000", "KEYS"};
    for (int j = i; j < i + 4; ++j) mig.push_back(names[j]);
    auto r = redis_->Command(src, mig);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->type, ReplyNode::Type::kStatus) << r->str;
    EXPECT_EQ(WrongObjects(*client_, names, data), 0u);
  }
  EXPECT_GT(client_->Stats().retries, retries0) << "moved keys answered ASK";
  // A new object written while the slot migrates lands on the importing node (ASK).
  names.push_back("mig/{tag}/new");
  data.push_back(Pattern(1000, 7));
  ASSERT_TRUE(PutOne(*client_, names.back(), data.back()).ok());

  for (int p : redis_->ports()) {
    ASSERT_TRUE(redis_->Command(p, {"CLUSTER", "SETSLOT", s, "NODE", dst_id}).ok());
  }
  const uint64_t retries1 = client_->Stats().retries;
  EXPECT_EQ(WrongObjects(*client_, names, data), 0u);
  EXPECT_GT(client_->Stats().retries, retries1) << "the old owner answered MOVED";
  const uint64_t retries2 = client_->Stats().retries;
  EXPECT_EQ(WrongObjects(*client_, names, data), 0u);
  EXPECT_EQ(client_->Stats().retries, retries2) << "the map was updated: no more redirections";
  auto moved = redis_->Command(src, {"GET", names[0]});
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->type, ReplyNode::Type::kError);
  EXPECT_EQ(moved->str.rfind("MOVED", 0), 0u) << moved->str;
}

}  // namespace
}  // namespace kvtier::redis::testing
