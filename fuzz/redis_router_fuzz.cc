// Fuzz target: what a Redis node sends the redis:// client, which routes by it: CLUSTER SLOTS replies
// (RESP, parsed by hiredis's reader as the client does), MOVED/ASK error replies and key slots.
// Properties: no crash; a slot map is built or refused with InvalidArgument, and a built one routes every
// slot to a shard with a usable address or to none; a parsed redirection is in range and parses back
// the same from its own text; a key's slot is below 16384 and is that of its {hash tag}.
#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "tiers/redis/conn.h"
#include "tiers/redis/bounded_reader.h"
#include "tiers/redis/router.h"

namespace kvtier::fuzz {
namespace {

using redis::kSlotCount;

void CheckSlotMap(std::string_view text) {
  redisReader* reader = redisReaderCreate();
  KVTIER_FUZZ_CHECK(reader != nullptr);
  redis::BoundReader(reader);  // as every connection's reader (tiers/redis/conn.cc)
  if (redisReaderFeed(reader, text.data(), text.size()) == REDIS_OK) {
    for (int i = 0; i < 4; ++i) {
      void* reply = nullptr;
      if (redisReaderGetReply(reader, &reply) != REDIS_OK || reply == nullptr) break;
      const redis::ReplyNode node = redis::ToReplyNode(static_cast<redisReply*>(reply));
      freeReplyObject(reply);
      auto m = redis::SlotMap::FromClusterSlots(node, redis::NodeAddr{"10.0.0.1", 7000});
      if (!m.ok()) {
        KVTIER_FUZZ_CHECK(m.status().code() == Code::kInvalidArgument);
        continue;
      }
      int covered = 0;
      for (int s = 0; s < kSlotCount; ++s) {
        const redis::Shard* shard = m->ShardFor(s);
        if (shard == nullptr) continue;
        ++covered;
        KVTIER_FUZZ_CHECK(!shard->master.host.empty() && shard->master.port > 0 && shard->master.port < 65536);
      }
      KVTIER_FUZZ_CHECK(covered == m->covered_slots());
      KVTIER_FUZZ_CHECK(m->ShardFor(-1) == nullptr && m->ShardFor(kSlotCount) == nullptr);
    }
  }
  redisReaderFree(reader);
}

void CheckRedirect(std::string_view text) {
  auto r = redis::ParseRedirect(text);
  KVTIER_FUZZ_CHECK(!redis::ErrorReplyStatus(text, "n:1").ok());
  if (!r) return;
  KVTIER_FUZZ_CHECK(r->slot >= 0 && r->slot < kSlotCount);
  KVTIER_FUZZ_CHECK(r->node.port > 0 && r->node.port < 65536 && !r->node.host.empty());
  KVTIER_FUZZ_CHECK(redis::ErrorReplyStatus(text, "n:1").retryable());
  const bool v6 = r->node.host.find(':') != std::string::npos;
  const std::string again = std::string(r->kind == redis::Redirect::Kind::kMoved ? "MOVED " : "ASK ") +
                            std::to_string(r->slot) + " " + (v6 ? "[" + r->node.host + "]" : r->node.host) + ":" +
                            std::to_string(r->node.port);
  auto back = redis::ParseRedirect(again);
  KVTIER_FUZZ_CHECK(back.has_value() && back->kind == r->kind && back->slot == r->slot && back->node == r->node);
}

void CheckKeySlot(std::string_view key) {
  const int slot = redis::KeySlot(key);
  KVTIER_FUZZ_CHECK(slot >= 0 && slot < kSlotCount);
  const size_t open = key.find('{');
  if (open == std::string_view::npos) {
    KVTIER_FUZZ_CHECK(slot == redis::Crc16(key) % kSlotCount);
    return;
  }
  const size_t close = key.find('}', open + 1);
  if (close != std::string_view::npos && close > open + 1) {
    KVTIER_FUZZ_CHECK(slot == redis::KeySlot("x{" + std::string(key.substr(open + 1, close - open - 1)) + "}y"));
  } else {
    KVTIER_FUZZ_CHECK(slot == redis::Crc16(key) % kSlotCount);
  }
}

}  // namespace

int FuzzRedisRouter(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckSlotMap(text);
  CheckRedirect(text);
  CheckKeySlot(text);
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzRedisRouter)
