// Figures of a trace that need no store: distinct blocks, and the prefix hit ratio a cache of
// unlimited capacity would reach (every block seen before is still there).
//
// Pure functions over a Trace; thread-safe.
#pragma once

#include <cstdint>

#include "eval/replay/trace.h"

namespace kvtier::internal {

// Tokens a request reuses when its first `hit_blocks` blocks are cached: min(k x block, input).
inline uint64_t HitTokens(const TraceRequest& r, uint64_t hit_blocks, uint32_t block_tokens) {
  const uint64_t t = hit_blocks * block_tokens;
  return t < r.input_length ? t : r.input_length;
}

struct TraceSummary {
  uint64_t requests = 0;
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  uint64_t block_refs = 0;
  uint64_t unique_blocks = 0;
  uint64_t unlimited_hit_blocks = 0;
  uint64_t unlimited_hit_tokens = 0;
  uint64_t duration_ms = 1;

  double UnlimitedHitRatio() const {
    return input_tokens ? static_cast<double>(unlimited_hit_tokens) / input_tokens : 0.0;
  }
};

TraceSummary SummarizeTrace(const Trace& trace);

}  // namespace kvtier::internal
