// Fuzz target: the outside input of `kvtier replay`: one line of a request trace (JSONL), a replay tier
// URL and a token count. Properties: no crash; malformed input is InvalidArgument; an accepted line
// has exactly ceil(input_length / block_tokens) hash ids (computed here without overflow); a replay
// tier's capacity is at least one block.
//
// Input: byte 0 picks block_tokens (1..255, or 512 when 0); the rest is the line, also read as a
// replay tier URL and as a token count.
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "eval/replay/replay_tier.h"
#include "eval/replay/trace.h"

namespace kvtier::fuzz {

int FuzzTraceLine(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint32_t block_tokens = data[0] == 0 ? 512 : data[0];
  const std::string_view line(reinterpret_cast<const char*>(data + 1), size - 1);
  auto tokens = internal::ParseTokenCount(line);
  if (!tokens.ok()) KVTIER_FUZZ_CHECK(tokens.status().code() == Code::kInvalidArgument);
  internal::ReplayScale scale;
  scale.block_tokens = block_tokens;
  scale.model_bytes_per_token = 131072;
  auto tier = internal::ParseReplayTier(line, scale);
  if (tier.ok()) {
    KVTIER_FUZZ_CHECK(tier->unlimited || tier->capacity_blocks >= 1);
  } else {
    KVTIER_FUZZ_CHECK(tier.status().code() == Code::kInvalidArgument);
  }
  auto r = internal::ParseTraceLine(line, block_tokens);
  if (!r.ok()) {
    KVTIER_FUZZ_CHECK(r.status().code() == Code::kInvalidArgument);
    return 0;
  }
  const unsigned __int128 want = (static_cast<unsigned __int128>(r->input_length) + block_tokens - 1) /
                                 block_tokens;
  KVTIER_FUZZ_CHECK(want == r->hash_ids.size());
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzTraceLine)
