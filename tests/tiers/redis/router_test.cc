// The pure Redis Cluster routing layer: CRC16, key slots with hash tags, CLUSTER SLOTS replies,
// MOVED/ASK parsing, error classification and the redis:// options; the bench reference's pipelining.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <hiredis/hiredis.h>

#include <string>
#include <vector>

#include "tiers/redis/bounded_reader.h"
#include "tiers/redis/conn.h"
#include "tiers/redis/plain_reference.h"
#include "tiers/redis/redis_client.h"
#include "tiers/redis/router.h"

namespace kvtier::redis {
namespace {

using T = ReplyNode::Type;

ReplyNode Int(long long v) { return ReplyNode{T::kInteger, "", v, {}}; }
ReplyNode Str(std::string s) { return ReplyNode{T::kString, std::move(s), 0, {}}; }
ReplyNode Arr(std::vector<ReplyNode> e) { return ReplyNode{T::kArray, "", 0, std::move(e)}; }
ReplyNode Node(std::string host, int port) { return Arr({Str(std::move(host)), Int(port), Str("id")}); }

TEST(RedisRouter, Crc16CheckValue) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);  // the XMODEM check value the cluster specification quotes
  EXPECT_EQ(Crc16(""), 0);
}

TEST(RedisRouter, HashTags) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") % kSlotCount);  // empty tag: whole key
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));                 // tag is "{bar"
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));                  // first tag only
  EXPECT_EQ(KeySlot("foo{bar"), Crc16("foo{bar") % kSlotCount);        // no closing brace
  for (int i = 0; i < 1000; ++i) {
    const int s = KeySlot("k" + std::to_string(i));
    EXPECT_GE(s, 0);
    EXPECT_LT(s, kSlotCount);
  }
}

TEST(RedisRouter, SlotMapFromClusterSlots) {
  const ReplyNode reply = Arr({
      Arr({Int(0), Int(5460), Node("127.0.0.1", 7001), Node("127.0.0.1", 7004)}),
      Arr({Int(5461), Int(10922), Node("", 7002)}),  // empty host: the queried node's host
      Arr({Int(10923), Int(16383), Node("10.0.0.3", 7003), Node("?", 7006)}),
  });
  auto m = SlotMap::FromClusterSlots(reply, NodeAddr{"192.168.1.5", 7001});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->covered_slots(), kSlotCount);
  EXPECT_EQ(m->shards().size(), 3u);
  EXPECT_EQ(m->ShardFor(0)->master, (NodeAddr{"127.0.0.1", 7001}));
  ASSERT_EQ(m->ShardFor(5460)->replicas.size(), 1u);
  EXPECT_EQ(m->ShardFor(5460)->replicas[0], (NodeAddr{"127.0.0.1", 7004}));
  EXPECT_EQ(m->ShardFor(5461)->master, (NodeAddr{"192.168.1.5", 7002}));
  EXPECT_TRUE(m->ShardFor(16383)->replicas.empty()) << "a replica without address is skipped";
  EXPECT_EQ(m->ShardFor(kSlotCount), nullptr);

  SlotMap moved = *m;
  moved.Move(3, NodeAddr{"192.168.1.5", 7002});  // a known master: no new shard
  EXPECT_EQ(moved.ShardFor(3)->master, (NodeAddr{"192.168.1.5", 7002}));
  moved.Move(4, NodeAddr{"127.0.0.1", 7999});
  EXPECT_EQ(moved.ShardFor(4)->master, (NodeAddr{"127.0.0.1", 7999}));
  EXPECT_EQ(moved.shards().size(), 4u);
  EXPECT_EQ(m->ShardFor(3)->master, (NodeAddr{"127.0.0.1", 7001})) << "the copy changed, not the original";
}

TEST(RedisRouter, PartialAndMalformedSlotReplies) {
  auto partial = SlotMap::FromClusterSlots(Arr({Arr({Int(10), Int(19), Node("h", 1)})}), NodeAddr{"q", 2});
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->covered_slots(), 10);
  EXPECT_EQ(partial->ShardFor(9), nullptr);
  const NodeAddr q{"q", 1};
  for (const ReplyNode& bad : {Str("x"), Arr({Str("x")}), Arr({Arr({Int(5), Int(4), Node("h", 1)})}),
                               Arr({Arr({Int(0), Int(kSlotCount), Node("h", 1)})}),
                               Arr({Arr({Int(0), Int(1), Node("h", 0)})}), Arr({Arr({Int(0), Int(1), Node("?", 5)})}),
                               Arr({Arr({Int(0), Int(1)})})}) {
    auto m = SlotMap::FromClusterSlots(bad, q);
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  }
}

TEST(RedisRouter, Redirections) {
  auto moved = ParseRedirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->node, (NodeAddr{"127.0.0.1", 6381}));
  auto ask = ParseRedirect("ASK 0 [::1]:7000");
  ASSERT_TRUE(ask.has_value());
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->node, (NodeAddr{"::1", 7000}));
  auto v6 = ParseRedirect("MOVED 5 fe80::1:7000");  // Redis writes IPv6 without brackets
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->node, (NodeAddr{"fe80::1", 7000}));
  for (const char* bad : {"MOVED", "MOVED 3999", "MOVED 16384 h:1", "MOVED -1 h:1", "ASK x h:1",
                          "MOVED 1 h:0", "MOVED 1 h", "ERR MOVED 1 h:1", "moved 1 h:1", "MOVED 1 :5",
                          "ASK 1218 ]1[:2::7002", "MOVED 1 [h]]:5"}) {
    EXPECT_FALSE(ParseRedirect(bad).has_value()) << bad;
  }
}

TEST(RedisRouter, ErrorReplies) {
  for (const char* e : {"TRYAGAIN Multiple keys", "CLUSTERDOWN The cluster is down", "LOADING Redis is loading",
                        "MASTERDOWN Link with MASTER is down"}) {
    Status s = ErrorReplyStatus(e, "h:1");
    EXPECT_TRUE(s.retryable()) << e;
    EXPECT_EQ(s.code(), Code::kIOError);
  }
  EXPECT_TRUE(ErrorReplyStatus("OOM command not allowed when used memory > 'maxmemory'.", "h:1").IsNoSpace());
  EXPECT_EQ(ErrorReplyStatus("NOAUTH Authentication required.", "h:1").code(), Code::kInvalidArgument);
  EXPECT_FALSE(ErrorReplyStatus("WRONGPASS invalid username-password pair", "h:1").retryable());
  EXPECT_EQ(ErrorReplyStatus("ERR unknown command", "h:1").code(), Code::kIOError);
  EXPECT_FALSE(ErrorReplyStatus("ERR unknown command", "h:1").retryable());
  EXPECT_TRUE(IsClusterDisabled("ERR This instance has cluster support disabled"));
  EXPECT_EQ(GlobEscape("a*b?c[d]e\\f"), "a\\*b\\?c\\[d\\]e\\\\f");
}

TEST(RedisRouter, NodeLists) {
  auto l = ParseNodeList("127.0.0.1:7000,host-b:7001,[::1]:7002");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[1], (NodeAddr{"host-b", 7001}));
  for (const char* bad : {"", "h", "h:", ":1", "h:0", "h:65536", "h:1,", "h:1,,h:2", "u@h:1", "h:1/x"}) {
    EXPECT_FALSE(ParseNodeList(bad).ok()) << bad;
  }
}

TEST(RedisOptions, UrlOptions) {
  auto u = TierUrl::Parse("redis://127.0.0.1:7000,127.0.0.1:7001?replica_reads=1&ttl=90s&timeout_ms=1500"
                          "&connect_timeout_ms=2000&conns_per_node=8&namespace=team");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  auto o = ParseRedisOptions(*u);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->seeds.size(), 2u);
  EXPECT_TRUE(o->replica_reads);
  EXPECT_EQ(o->ttl.count(), 90000);
  EXPECT_EQ(o->timeout.count(), 1500);
  EXPECT_EQ(o->connect_timeout.count(), 2000);
  EXPECT_EQ(o->conns_per_node, 8);
  EXPECT_EQ(o->ns, "team");
  EXPECT_TRUE(o->password.empty());

  const std::string pw = ::testing::TempDir() + "/redis-router-test-pw";
  std::ofstream(pw) << "hunter2\n";
  std::filesystem::permissions(pw, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto withpw = TierUrl::Parse("redis://h:1?password_file=" + pw + "&user=alice");
  ASSERT_TRUE(withpw.ok());
  auto p = ParseRedisOptions(*withpw);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->password, "hunter2");
  EXPECT_EQ(p->user, "alice");
  std::remove(pw.c_str());

  // A bare ttl= number read as milliseconds (600 ms) where every other duration reads seconds: refused.
  for (const char* bare : {"redis://h:1?ttl=600", "redis://h:1?ttl=0"}) {
    auto url = TierUrl::Parse(bare);
    ASSERT_TRUE(url.ok()) << bare;
    const auto parsed = ParseRedisOptions(*url);
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument) << bare << " was read as " << (parsed.ok() ? parsed->ttl.count() : -1) << " ms";
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find("needs a unit"), std::string::npos) << parsed.status().ToString();
    }
  }
  for (const char* unit : {"600s", "600ms", "10m"}) {
    auto url = TierUrl::Parse(std::string("redis://h:1?ttl=") + unit);
    ASSERT_TRUE(url.ok());
    EXPECT_TRUE(ParseRedisOptions(*url).ok()) << unit;
  }
  for (const char* bad : {"redis://h:1?password=x", "redis://h:1?timeout_ms=x", "redis://h:1?ttl=1y",
                          "redis://h:1?conns_per_node=0", "redis://h:1?user=bob", "redis://h?x=1",
                          "redis://h:1?password_file=/nonexistent/kvtier-pw", "redis://u:pw@h:1"}) {
    auto url = TierUrl::Parse(bad);
    ASSERT_TRUE(url.ok()) << bad;
    EXPECT_EQ(ParseRedisOptions(*url).status().code(), Code::kInvalidArgument) << bad;
  }
}

// A reply that announces more elements than any kvtier asks for is a protocol error, not an allocation
// of the announced size (hiredis sizes an array's table from its header: *666666663 was 5 GB).
TEST(BoundedReader, AnArrayAnnouncingTooManyElementsIsAnErrorNotAnAllocation) {
  auto get = [](const std::string& wire, void** reply) {
    redisReader* r = redisReaderCreate();
    BoundReader(r);
    EXPECT_EQ(redisReaderFeed(r, wire.data(), wire.size()), REDIS_OK);
    const int rc = redisReaderGetReply(r, reply);
    redisReaderFree(r);
    return rc;
  };
  void* reply = nullptr;
  EXPECT_EQ(get("*666666663\r\n:1\r\n", &reply), REDIS_ERR);
  EXPECT_EQ(reply, nullptr);
  EXPECT_EQ(get("*" + std::to_string(kMaxReplyElements + 1) + "\r\n", &reply), REDIS_ERR);
  // Nested replies within the bound read as before.
  ASSERT_EQ(get("*2\r\n*2\r\n:7\r\n$2\r\nid\r\n*0\r\n", &reply), REDIS_OK);
  ASSERT_NE(reply, nullptr);
  const ReplyNode node = ToReplyNode(static_cast<redisReply*>(reply));
  freeReplyObject(reply);
  ASSERT_EQ(node.elements.size(), 2u);
  EXPECT_EQ(node.elements[0].elements[0].integer, 7);
  EXPECT_EQ(node.elements[0].elements[1].str, "id");
  EXPECT_TRUE(node.elements[1].elements.empty());
}


// The bench's raw hiredis reference (plain_reference.h) without a server: kvtier's shapes, the spread of
// values over connections, and the sliding window that keeps `depth` commands unanswered.
TEST(PlainReference, ShapesFollowKvtiersWindowsAndBudget) {
  const uint64_t v = 1000;
  EXPECT_EQ(ReadShapeOf(16 * v, v).in_flight, 16u);  // two windows of 8
  EXPECT_EQ(ReadShapeOf(16 * v, v).conns_per_master, 2u);
  EXPECT_EQ(ReadShapeOf(3 * v, v).in_flight, 2u);  // two windows of floor(1.5) = 1
  EXPECT_EQ(ReadShapeOf(v, v).in_flight, 1u);      // one window of the whole bound
  EXPECT_EQ(ReadShapeOf(v, v).conns_per_master, 1u);
  EXPECT_EQ(ReadShapeOf(10, v).in_flight, 1u);  // a bound below one value still moves one
  EXPECT_EQ(WriteShapeOf(4 * v + 999, v, 4).in_flight, 4u);
  EXPECT_EQ(WriteShapeOf(4 * v, v, 4).conns_per_master, 4u);
  EXPECT_EQ(WriteShapeOf(10, v, 4).in_flight, 1u);
}

TEST(PlainReference, PlansSpreadEveryValueOnItsMastersConnections) {
  const auto plans = PlanPipelines(3, 100, PipelineShape{16, 2});
  ASSERT_EQ(plans.size(), 6u);  // min(16, 3 masters x 2)
  uint64_t depth = 0;
  std::vector<int> seen(100, 0);
  for (size_t k = 0; k < plans.size(); ++k) {
    EXPECT_EQ(plans[k].master, k % 3);
    depth += plans[k].depth;
    for (uint64_t i : plans[k].values) {
      EXPECT_EQ(i % 3, plans[k].master) << "value " << i << " is on master i % 3";
      ++seen[i];
    }
    EXPECT_GE(plans[k].values.size(), 16u);
  }
  EXPECT_EQ(depth, 16u) << "the depths add up to the values in flight";
  for (int n : seen) EXPECT_EQ(n, 1);
  const auto one = PlanPipelines(1, 5, PipelineShape{1, 4});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].depth, 1u);
  EXPECT_EQ(one[0].values.size(), 5u);
}

TEST(PlainReference, PipelineKeepsDepthCommandsUnanswered) {
  uint64_t sent = 0, answered = 0, most = 0, unflushed = 0;
  std::vector<uint64_t> order;
  PipelineSteps steps;
  steps.send = [&](uint64_t k) {
    EXPECT_EQ(k, sent);
    ++sent;
    ++unflushed;
    most = std::max(most, sent - answered);
    return true;
  };
  steps.flush = [&] {
    unflushed = 0;
    return true;
  };
  steps.receive = [&](uint64_t k) {
    EXPECT_EQ(unflushed, 0u) << "a reply is read only after what was queued is written";
    order.push_back(k);
    ++answered;
    return true;
  };
  EXPECT_EQ(RunPipeline(10, 3, steps), 10u);
  EXPECT_EQ(most, 3u);
  EXPECT_EQ(sent, 10u);
  ASSERT_EQ(order.size(), 10u);
  for (uint64_t k = 0; k < 10; ++k) EXPECT_EQ(order[k], k);
  steps.receive = [&](uint64_t k) { return k < 4; };  // the connection fails at reply 4
  sent = answered = 0;
  EXPECT_EQ(RunPipeline(10, 3, steps), 4u);
  EXPECT_LE(sent, 7u);
}

}  // namespace
}  // namespace kvtier::redis
