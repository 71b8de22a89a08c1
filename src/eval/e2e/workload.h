// The "cold recovery" workload of `kvtier bench e2e`.
//
// Many multi-turn sessions hold long contexts (default 8,192 tokens). Their KV was computed and saved
// in an earlier turn, then evicted from the engine's pool by other traffic. Each session now returns
// with its whole context plus a new user turn, and asks for a short answer. N closed-loop clients
// replay the returning sessions against one engine in one of these modes:
//
//   recompute  no external tier: the context is prefilled again
//   mem        mem://   (holds every session)
//   file       file://  (local disk)
//   fs         fs://    (a shared-filesystem pool; here a local directory)
//   mem+file   mem:// over file://, the memory tier holding only part of the sessions
//
// Token ids are pseudo-random but deterministic per (seed, session), so runs and modes are comparable.
// Plain values and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

struct WorkloadOptions {
  uint32_t context_tokens = 8192;  // tokens of earlier turns, cached by the tiers
  uint32_t turn_tokens = 128;      // the new user turn (never cached)
  uint32_t output_tokens = 32;     // greedy answer length
  uint32_t vocab = 32000;
  uint64_t seed = 42;
};

// Context of `session` (what turn 1 saved) and the returning prompt (context + new turn).
std::vector<uint32_t> SessionContext(const WorkloadOptions& w, uint32_t session);
std::vector<uint32_t> SessionPrompt(const WorkloadOptions& w, uint32_t session);

struct ModeSpec {
  std::string name;                // "recompute", "mem", "file", "fs", "mem+file"
  std::vector<std::string> tiers;  // tier URLs, fastest first; empty for recompute
};

// Tier URLs of `mode` with its directories under `dir`; `mem_bytes` sizes mem:// (mem+file gets half
// of it) and `disk_bytes` the file:// capacity. InvalidArgument for an unknown mode name.
Result<ModeSpec> MakeMode(const std::string& name, const std::string& dir, uint64_t mem_bytes,
                          uint64_t disk_bytes);
// "recompute,mem,file,fs,mem+file"
const std::vector<std::string>& AllModeNames();

}  // namespace kvtier::internal
