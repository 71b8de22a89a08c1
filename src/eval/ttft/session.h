// The sessions of `kvtier bench ttft`: deterministic token streams, their chunk keys, and the turn
// arithmetic (what a returning turn finds cached and what it must compute).
// Plain values and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "kvtier/keys.h"
#include "eval/ttft/plan.h"

namespace kvtier::internal {

struct TtftSession {
  uint32_t id = 0;
  std::vector<uint32_t> tokens;  // context + turns x turn_tokens, pseudo-random ids, fixed by id
  std::vector<ChunkKey> keys;    // of every full chunk of `tokens`
};

TtftSession MakeSession(const TtftOptions& o, const Namespace& ns, uint32_t id);

// Turn t (0-based) of a session: its prompt is context + (t + 1) x turn_tokens tokens; what earlier
// turns saved is the full chunks of the first context + t x turn_tokens tokens.
struct TurnShape {
  uint64_t prompt_tokens = 0;
  uint64_t saved_chunks = 0;  // chunks a tier may hold for this turn's prefix
  uint64_t prompt_chunks = 0; // full chunks of the prompt, saved after the turn
};
TurnShape ShapeOf(const TtftOptions& o, uint32_t turn);

// Chunks the tiers hold for a session before its first returning turn.
inline uint64_t InitialChunks(const TtftOptions& o) { return ShapeOf(o, 0).saved_chunks; }

}  // namespace kvtier::internal
