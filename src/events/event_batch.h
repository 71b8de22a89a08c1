// The wire form of chunk events: one msgpack-encoded batch in the shape of vLLM's KVEventBatch
// (array-encoded, tagged events), as llm-d's and vLLM's own subscribers decode it. docs/serve.md lists
// the fields. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvtier/events.h"

namespace kvtier::internal {

// [ts, [event, ...]]: a stored event is
//   ["BlockStored", [key], nil, [], tokens_per_chunk, nil, medium, nil, [[namespace id]]]
// (block hashes, parent hash, token ids, block size, lora id, medium, lora name, extra keys), a
// removed or evicted one ["BlockRemoved", [key], medium]. Keys and namespace ids are 32-byte bin.
std::string EncodeEventBatch(double ts_seconds, std::span<const ChunkEvent> events);

// The 8-byte big-endian sequence number frame of a message.
std::string SequenceFrame(uint64_t seq);

}  // namespace kvtier::internal
