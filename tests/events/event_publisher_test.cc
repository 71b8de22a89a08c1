// EventPublisher: what a subscriber receives ([topic, sequence, msgpack batch] in the shape of vLLM's
// KV event batches, every event in order), and what a subscriber that stops reading costs: events
// dropped and counted at the publisher's bounded queue, while the Store's saves go on.
#include <gtest/gtest.h>

#include <zmq.hpp>
#include <msgpack.hpp>

#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/events.h"
#include "kvtier/metrics.h"
#include "kvtier/store.h"

namespace kvtier::testing {
namespace {

using namespace std::chrono_literals;

ChunkEvent MakeEvent(uint32_t i, ChunkEventKind kind) {
  ChunkEvent e;
  e.kind = kind;
  e.ns.fill(0xAB);
  e.key.bytes.fill(0);
  e.key.bytes[0] = static_cast<uint8_t>(i);
  e.key.bytes[1] = static_cast<uint8_t>(i >> 8);
  e.tier = 1;
  e.medium = kind == ChunkEventKind::kStored ? "DISK" : "CPU";
  e.tokens_per_chunk = kind == ChunkEventKind::kStored ? 256 : 0;
  return e;
}

// Waits (without a time assertion: 60 s is only a guard against a hang) until the publisher counts a
// subscriber: before that, ZeroMQ would drop what it publishes.
void WaitForSubscriber(const ChunkObserver& pub) {
  for (int i = 0; i < 6000 && pub.Stats().subscribers == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GE(pub.Stats().subscribers, 1u);
}

std::string Bin(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::BIN);
  return std::string(o.via.bin.ptr, o.via.bin.size);
}

std::string Str(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::STR);
  return std::string(o.via.str.ptr, o.via.str.size);
}

TEST(EventPublisherTest, SubscriberDecodesEveryEventInOrder) {
  auto pub = EventPublisher::Open({.endpoint = "tcp://127.0.0.1:*", .topic = "kv@pod@model"});
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 60000);
  sub.connect((*pub)->endpoint());
  WaitForSubscriber(**pub);

  constexpr uint32_t kEvents = 3000;
  for (uint32_t i = 0; i < kEvents; ++i) {
    (*pub)->OnChunkEvent(MakeEvent(i, i % 3 == 0 ? ChunkEventKind::kEvicted : ChunkEventKind::kStored));
  }
  uint32_t seen = 0;
  uint64_t expected_seq = 0;
  while (seen < kEvents) {
    zmq::message_t topic, seq, payload;
    ASSERT_TRUE(sub.recv(topic)) << "timed out after " << seen << " events";
    ASSERT_TRUE(topic.more());
    ASSERT_TRUE(sub.recv(seq));
    ASSERT_TRUE(sub.recv(payload));
    ASSERT_FALSE(payload.more());
    EXPECT_EQ(topic.to_string(), "kv@pod@model");
    ASSERT_EQ(seq.size(), 8u);
    uint64_t s = 0;
    for (size_t i = 0; i < 8; ++i) s = s << 8 | static_cast<const uint8_t*>(seq.data())[i];
    EXPECT_EQ(s, expected_seq++) << "sequence numbers count messages from 0";
    auto handle = msgpack::unpack(static_cast<const char*>(payload.data()), payload.size());
    const msgpack::object batch = handle.get();
    ASSERT_EQ(batch.type, msgpack::type::ARRAY);
    ASSERT_EQ(batch.via.array.size, 2u);  // [ts, events]
    EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
    const msgpack::object& events = batch.via.array.ptr[1];
    ASSERT_EQ(events.type, msgpack::type::ARRAY);
    for (uint32_t j = 0; j < events.via.array.size; ++j, ++seen) {
      const ChunkEvent want = MakeEvent(seen, seen % 3 == 0 ? ChunkEventKind::kEvicted : ChunkEventKind::kStored);
      const msgpack::object& e = events.via.array.ptr[j];
      ASSERT_EQ(e.type, msgpack::type::ARRAY);
      const msgpack::object* f = e.via.array.ptr;
      const std::string key(reinterpret_cast<const char*>(want.key.bytes.data()), 32);
      if (want.kind == ChunkEventKind::kStored) {
        ASSERT_EQ(e.via.array.size, 9u);
        EXPECT_EQ(Str(f[0]), "BlockStored");
        ASSERT_EQ(f[1].via.array.size, 1u);
        EXPECT_EQ(Bin(f[1].via.array.ptr[0]), key) << "event " << seen;
        EXPECT_TRUE(f[2].is_nil());                  // parent_block_hash
        EXPECT_EQ(f[3].via.array.size, 0u);          // token_ids
        EXPECT_EQ(f[4].as<uint32_t>(), 256u);        // block_size
        EXPECT_TRUE(f[5].is_nil());                  // lora_id
        EXPECT_EQ(Str(f[6]), "DISK");                // medium
        EXPECT_TRUE(f[7].is_nil());                  // lora_name
        EXPECT_EQ(Bin(f[8].via.array.ptr[0].via.array.ptr[0]), std::string(32, '\xAB'));  // extra_keys: namespace
      } else {
        ASSERT_EQ(e.via.array.size, 3u);
        EXPECT_EQ(Str(f[0]), "BlockRemoved");
        EXPECT_EQ(Bin(f[1].via.array.ptr[0]), key) << "event " << seen;
        EXPECT_EQ(Str(f[2]), "CPU");
      }
    }
  }
  EXPECT_EQ(seen, kEvents);
  EXPECT_EQ((*pub)->Stats().published, kEvents);
  EXPECT_EQ((*pub)->Stats().dropped, 0u);
}

TEST(EventPublisherTest, StalledSubscriberMakesCountedDropsNeverABlockedStore) {
  // Small buffers everywhere, so what a subscriber that never reads can absorb is a few messages.
  EventPublisherOptions o{.endpoint = "tcp://127.0.0.1:*", .queue_events = 64, .batch_events = 64,
                          .send_hwm = 1, .send_buffer = 4096};
  auto pub = EventPublisher::Open(o);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::rcvhwm, 1);
  sub.set(zmq::sockopt::rcvbuf, 4096);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect((*pub)->endpoint());
  WaitForSubscriber(**pub);

  StoreOptions opt;
  opt.tiers = {"mem://?capacity=4KiB&page=64"};
  opt.observer = *pub;
  auto store = std::move(Store::Open(opt)).value();
  const Layout layout{2, 1, 4, DType::kBF16, 4};  // 128-byte chunks: 32 fit, then each save evicts one
  const Namespace ns = *Namespace::Make("test/model", layout, "");
  std::vector<uint32_t> tokens(20000 * layout.tokens_per_chunk);
  std::iota(tokens.begin(), tokens.end(), 0u);
  const auto keys = ComputeChunkKeys(ns, tokens);
  std::vector<std::byte> payload(layout.BytesPerChunk());
  const std::span<const std::byte> piece(payload);
  const GatherList src(&piece, 1);
  for (const ChunkKey& k : keys) ASSERT_TRUE(store->Save(ns, std::span(&k, 1), std::span(&src, 1)).ok());
  // Every save returned although nobody reads: 20000 stored and 19968 evicted events, of which the
  // queue, the socket and the kernel hold a few hundred at most; the rest are counted as dropped.
  const StoreStats s = store->Stats();
  EXPECT_EQ(s.events, 20000u + 19968u);
  EXPECT_GT(s.events_dropped, 30000u);
  EXPECT_LE(s.events_published + s.events_dropped, s.events);
  const std::string text = PrometheusText(s);
  EXPECT_NE(text.find("kvtier_events_dropped_total " + std::to_string(s.events_dropped)), std::string::npos) << text;
}

TEST(EventPublisherTest, BadEndpointsAreRefused) {
  EXPECT_EQ(EventPublisher::Open({.endpoint = ""}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EventPublisher::Open({.endpoint = "127.0.0.1:5557"}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EventPublisher::Open({.endpoint = "tcp://127.0.0.1:*", .queue_events = 0}).status().code(),
            Code::kInvalidArgument);
  auto first = EventPublisher::Open({.endpoint = "tcp://127.0.0.1:*"});
  ASSERT_TRUE(first.ok());
  auto second = EventPublisher::Open({.endpoint = (*first)->endpoint()});
  EXPECT_EQ(second.status().code(), Code::kIOError) << "the port is taken";
}

}  // namespace
}  // namespace kvtier::testing
