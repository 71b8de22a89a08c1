// RedisClient under faults on real servers: a wrong password (one clear error), memory full with
// noeviction (NoSpace), a master killed with replicas (retryable errors, then success after the
// failover, 0 wrong bytes) and a node restarted empty (misses).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "redis_harness.h"

namespace kvtier::redis::testing {
namespace {

constexpr size_t kOneMiB = 1 << 20;

class RedisFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SkipReason().empty()) GTEST_SKIP() << SkipReason();
  }
  void Start(int masters, int replicas, const std::map<std::string, std::string>& env = {}) {
    auto r = LocalRedis::Start(masters, replicas, env);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    redis_ = std::move(r).value();
  }
  Result<std::unique_ptr<object::ObjectClient>> Open(const std::string& options) {
    KVTIER_ASSIGN_OR_RETURN(TierUrl u, TierUrl::Parse(redis_->url() + options));
    return OpenRedisClient(u, TierOpenOptions{});
  }
  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = redis_->dir() + "/" + name;
    std::ofstream(path) << text << "\n";
    ::chmod(path.c_str(), 0600);  // a secret: owner-only, or kvtier refuses it
    return path;
  }
  std::unique_ptr<LocalRedis> redis_;
};

TEST_F(RedisFaults, WrongPasswordIsOneClearError) {
  Start(1, 0, {{"KVTIER_REDIS_PASSWORD", "s3cret-pw"}});
  auto none = Open("");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  EXPECT_NE(none.status().message().find("password_file"), std::string::npos) << none.status().ToString();

  auto wrong = Open("?password_file=" + WriteFile("wrong", "not-it"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(wrong.status().retryable());
  EXPECT_NE(wrong.status().message().find("authentication failed"), std::string::npos)
      << wrong.status().ToString();
  EXPECT_EQ(wrong.status().message().find("not-it"), std::string::npos) << "the password is never shown";

  auto in_url = TierUrl::Parse(redis_->url() + "?password=s3cret-pw");
  ASSERT_TRUE(in_url.ok());
  EXPECT_EQ(OpenRedisClient(*in_url, {}).status().code(), Code::kInvalidArgument);

  auto right = Open("?password_file=" + WriteFile("right", "s3cret-pw"));
  ASSERT_TRUE(right.ok()) << right.status().ToString();
  auto data = Pattern(1000, 3);
  ASSERT_TRUE(PutOne(**right, "auth/x", data).ok());
  auto e = (*right)->Exists("auth/x");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(*e);
}

TEST_F(RedisFaults, NoEvictionFullIsNoSpace) {
  Start(1, 0, {{"KVTIER_REDIS_MAXMEMORY", "8mb"}, {"KVTIER_REDIS_POLICY", "noeviction"}});
  auto c = Open("");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Status last;
  int stored = 0;
  for (int i = 0; i < 20 && last.ok(); ++i) {
    last = PutOne(**c, "full/" + std::to_string(i), Pattern(kOneMiB, i));
    stored += last.ok() ? 1 : 0;
  }
  EXPECT_TRUE(last.IsNoSpace()) << last.ToString();
  EXPECT_GT(stored, 0);
  EXPECT_GT((*c)->Stats().errors, 0u);
  std::vector<std::byte> buf(kOneMiB);
  object::ObjectRead r{"full/0", buf, 0, {}};
  (*c)->GetMany(std::span(&r, 1));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(buf, Pattern(kOneMiB, 0));
}

TEST_F(RedisFaults, AllKeysLruEvictionIsMisses) {
  Start(1, 0, {{"KVTIER_REDIS_MAXMEMORY", "8mb"}, {"KVTIER_REDIS_POLICY", "allkeys-lru"}});
  auto c = Open("");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  constexpr int kPuts = 24;  // 24 MiB through an 8 MiB instance
  for (int i = 0; i < kPuts; ++i) ASSERT_TRUE(PutOne(**c, "lru/" + std::to_string(i), Pattern(kOneMiB, i)).ok());
  int hits = 0, misses = 0;
  std::vector<std::byte> buf(kOneMiB);
  for (int i = 0; i < kPuts; ++i) {
    object::ObjectRead r{"lru/" + std::to_string(i), buf, 0, {}};
    (*c)->GetMany(std::span(&r, 1));
    if (r.status.IsNotFound()) {
      ++misses;
      continue;
    }
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(buf, Pattern(kOneMiB, i));
    ++hits;
  }
  EXPECT_GT(misses, 0) << "Redis evicted objects: they read as misses";
  EXPECT_GT(hits, 0);
  EXPECT_EQ((*c)->Stats().errors, 0u) << "an eviction is not an error";
}

struct Objects {
  std::vector<std::string> names;
  std::vector<std::vector<std::byte>> data;
};

Objects PutObjects(object::ObjectClient& c, int n, size_t size) {
  Objects o;
  for (int i = 0; i < n; ++i) {
    o.names.push_back("fault/" + std::to_string(i));
    o.data.push_back(Pattern(size, 1000 + i));
    EXPECT_TRUE(PutOne(c, o.names.back(), o.data.back()).ok());
  }
  return o;
}

struct ReadCounts {
  int ok = 0, missing = 0, retryable = 0, other = 0, wrong_bytes = 0;
};

ReadCounts ReadAll(object::ObjectClient& c, const Objects& o) {
  std::vector<std::vector<std::byte>> got(o.names.size());
  std::vector<object::ObjectRead> ops(o.names.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    got[i].assign(o.data[i].size(), std::byte{0});
    ops[i].name = o.names[i];
    ops[i].dst = got[i];
  }
  c.GetMany(ops);
  ReadCounts n;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Status& s = ops[i].status;
    if (s.ok()) {
      ++n.ok;
      n.wrong_bytes += got[i] == o.data[i] ? 0 : 1;
    } else if (s.IsNotFound()) {
      ++n.missing;
    } else if (s.retryable()) {
      ++n.retryable;
    } else {
      ++n.other;
      ADD_FAILURE() << o.names[i] << ": " << s.ToString();
    }
  }
  return n;
}

TEST_F(RedisFaults, MasterKilledFailsOverToReplica) {
  Start(3, 1);
  auto c = Open("?timeout_ms=2000&connect_timeout_ms=500");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Objects o = PutObjects(**c, 24, 256 * 1024);
  const int victim = redis_->MasterOf(KeySlot(o.names[0]), redis_->ports()[0]);
  ASSERT_NE(victim, 0);
  // Every write reached the victim's replica before the kill (WAIT on the victim's shard).
  for (int p : redis_->ports()) {
    auto role = redis_->Command(p, {"ROLE"});
    ASSERT_TRUE(role.ok());
    if (role->elements.empty() || role->elements[0].str != "slave" || role->elements.size() < 3 ||
        role->elements[2].integer != victim) {
      continue;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      auto a = redis_->Command(victim, {"DBSIZE"}), b = redis_->Command(p, {"DBSIZE"});
      if (a.ok() && b.ok() && a->integer == b->integer) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Reads from replicas (READONLY): the same bytes, served by replica nodes.
  ASSERT_TRUE(redis_->WaitReplicasListed(redis_->ports()[0], 1, 30));
  auto from_replicas = Open("?replica_reads=1");
  ASSERT_TRUE(from_replicas.ok()) << from_replicas.status().ToString();
  ReadCounts replica_reads = ReadAll(**from_replicas, o);
  EXPECT_EQ(replica_reads.wrong_bytes, 0);
  EXPECT_EQ(replica_reads.ok + replica_reads.missing, static_cast<int>(o.names.size()));
  long long replica_gets = 0;
  for (int p : redis_->ports()) {
    auto role = redis_->Command(p, {"ROLE"});
    auto stats = redis_->Command(p, {"INFO", "commandstats"});
    ASSERT_TRUE(role.ok() && stats.ok());
    const size_t at = stats->str.find("cmdstat_get:calls=");
    if (role->elements.empty() || role->elements[0].str != "slave" || at == std::string::npos) continue;
    replica_gets += std::stoll(stats->str.substr(at + 18));
  }
  EXPECT_GE(replica_gets, replica_reads.ok) << "the GETs went to replicas";
  from_replicas->reset();

  redis_->Kill(victim);

  ReadCounts first = ReadAll(**c, o);
  EXPECT_EQ(first.wrong_bytes, 0);
  EXPECT_EQ(first.other, 0);
  std::cout << "right after the kill: " << first.ok << " ok, " << first.retryable << " retryable, "
            << first.missing << " missing" << std::endl;

  ASSERT_TRUE(redis_->WaitClusterOk(60)) << "no failover within 60 s";
  ReadCounts after;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    after = ReadAll(**c, o);
    EXPECT_EQ(after.wrong_bytes, 0);
  } while (after.ok != static_cast<int>(o.names.size()) && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(after.ok, static_cast<int>(o.names.size())) << "every object served by the promoted replica";
  EXPECT_GT((*c)->Stats().retries, 0u);
  // And writes go on.
  EXPECT_TRUE(PutOne(**c, o.names[0], o.data[1]).ok());
}

TEST_F(RedisFaults, NodeRestartedEmptyMeansMisses) {
  Start(3, 0);
  auto c = Open("?timeout_ms=2000&connect_timeout_ms=500");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Objects o = PutObjects(**c, 24, 64 * 1024);
  const int victim = redis_->MasterOf(KeySlot(o.names[0]), redis_->ports()[0]);
  ASSERT_NE(victim, 0);
  int on_victim = 0;
  for (const auto& n : o.names) on_victim += redis_->MasterOf(KeySlot(n), redis_->ports()[0]) == victim ? 1 : 0;
  redis_->Kill(victim);
  ReadCounts down = ReadAll(**c, o);
  EXPECT_EQ(down.wrong_bytes, 0);
  ASSERT_TRUE(redis_->Restart(victim).ok());
  ASSERT_TRUE(redis_->WaitClusterOk(60));
  ReadCounts after;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    after = ReadAll(**c, o);
  } while (after.retryable > 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(after.wrong_bytes, 0);
  EXPECT_EQ(after.missing, on_victim) << "the restarted node lost its objects";
  EXPECT_EQ(after.ok, static_cast<int>(o.names.size()) - on_victim);
}

}  // namespace
}  // namespace kvtier::redis::testing
