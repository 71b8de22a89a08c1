// The offline optimum a replay is measured against: Belady's MIN on the trace's block references,
// with the replay's prefix-hit accounting.
//
// What it computes, precisely. The trace's block references are taken in order (request by request,
// block by block). A cache of `capacity_blocks` blocks knows every future reference; when a block not
// in the cache is referenced and the cache is full, it drops the cached block whose next reference
// is farthest away, or does not keep the new block at all when the new block's own next reference is
// farther still (MIN with bypass). A request is credited exactly as the replay credits the Store: its
// leading blocks found in the cache when it arrives, as tokens (HitTokens). This is the reference of
// issue 38's table (1M tokens: 0.383, 3M: 0.560, 10M: 0.651 on the public trace).
//
// It is the optimum for block hits (MIN maximises references found resident), so `block_hits` bounds
// what any cache of that size finds, block by block. The token hit ratio counts only leading blocks,
// which MIN does not aim at; a policy could in principle beat it by a little there. Read it as the
// limit a recency or frequency policy is measured against, not as a proof.
//
// Pure functions; O(R log C) time and O(R) memory for R references; thread-safe.
#pragma once

#include <cstdint>

#include "eval/replay/trace.h"

namespace kvtier::internal {

struct BeladyResult {
  uint64_t capacity_blocks = 0;  // 0: unlimited
  uint64_t hit_tokens = 0;       // leading-block hits, as tokens (the replay's accounting)
  uint64_t hit_blocks = 0;       // leading-block hits, as blocks
  uint64_t resident_refs = 0;    // every reference that found its block cached (MIN's own figure)
  uint64_t input_tokens = 0;

  double TokenHitRatio() const {
    return input_tokens ? static_cast<double>(hit_tokens) / input_tokens : 0.0;
  }
};

// MIN over `trace` with a cache of `capacity_blocks` blocks (0 = unlimited: every block seen before
// is still cached, the trace's ceiling).
BeladyResult Belady(const Trace& trace, uint64_t capacity_blocks);

}  // namespace kvtier::internal
