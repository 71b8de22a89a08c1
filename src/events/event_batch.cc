#include "events/event_batch.h"

#include <msgpack.hpp>

namespace kvtier::internal {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackDigest(Packer& pk, const Digest& d) {
  pk.pack_bin(static_cast<uint32_t>(d.size()));
  pk.pack_bin_body(reinterpret_cast<const char*>(d.data()), static_cast<uint32_t>(d.size()));
}

void PackString(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackStored(Packer& pk, const ChunkEvent& e) {
  pk.pack_array(9);
  PackString(pk, "BlockStored");
  pk.pack_array(1);
  PackDigest(pk, e.key.bytes);
  pk.pack_nil();       // parent_block_hash: not known per chunk (a key already names its whole prefix)
  pk.pack_array(0);    // token_ids: the Store sees keys, not tokens
  pk.pack_uint32(e.tokens_per_chunk);
  pk.pack_nil();       // lora_id
  PackString(pk, e.medium);
  pk.pack_nil();       // lora_name
  pk.pack_array(1);    // extra_keys: one entry per block, the namespace its key was chained from
  pk.pack_array(1);
  PackDigest(pk, e.ns);
}

void PackRemoved(Packer& pk, const ChunkEvent& e) {
  pk.pack_array(3);
  PackString(pk, "BlockRemoved");
  pk.pack_array(1);
  PackDigest(pk, e.key.bytes);
  PackString(pk, e.medium);
}

}  // namespace

std::string EncodeEventBatch(double ts_seconds, std::span<const ChunkEvent> events) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_array(2);
  pk.pack_double(ts_seconds);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const ChunkEvent& e : events) {
    if (e.kind == ChunkEventKind::kStored) {
      PackStored(pk, e);
    } else {
      PackRemoved(pk, e);
    }
  }
  return std::string(buf.data(), buf.size());
}

std::string SequenceFrame(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) out[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
  return out;
}

}  // namespace kvtier::internal
