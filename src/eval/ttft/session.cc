#include "eval/ttft/session.h"

namespace kvtier::internal {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

TtftSession MakeSession(const TtftOptions& o, const Namespace& ns, uint32_t id) {
  TtftSession s;
  s.id = id;
  const uint64_t n = o.context_tokens + static_cast<uint64_t>(o.turns) * o.turn_tokens;
  s.tokens.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    s.tokens[i] = static_cast<uint32_t>(SplitMix((static_cast<uint64_t>(id) << 32) ^ i) % 32000);
  }
  s.keys = ComputeChunkKeys(ns, s.tokens);
  return s;
}

TurnShape ShapeOf(const TtftOptions& o, uint32_t turn) {
  const uint64_t per = o.model.layout.tokens_per_chunk;
  TurnShape t;
  t.prompt_tokens = o.context_tokens + static_cast<uint64_t>(turn + 1) * o.turn_tokens;
  t.saved_chunks = (o.context_tokens + static_cast<uint64_t>(turn) * o.turn_tokens) / per;
  t.prompt_chunks = t.prompt_tokens / per;
  return t;
}

}  // namespace kvtier::internal
