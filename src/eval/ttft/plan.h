// `kvtier bench ttft`: what a run will hold, and whether it fits, worked out before anything is written.
//
// Workload (ttft/run.h): at each concurrency c, max(c, min_sessions) multi-turn sessions return; each
// holds `context_tokens` of saved KV at its first returning turn and adds `turn_tokens` per turn
// (the previous answer plus the new message), for `turns` turns. Modes run one after another and each
// (mode, concurrency) point starts from empty tiers, so the largest point of the largest mode bounds
// what is held at once:
//   mem       the KV in mem:// + the clients' load buffers, in memory
//   file, fs  the KV as chunk files on the --dir filesystem + load buffers in memory
//   mem+file  half of the KV in mem:// and all of it in file://
// A client streams its prefix through a buffer of `load_batch_chunks` chunks (a GPU's staging area),
// so memory does not grow with the context.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/gpuprofile/gpu_profile.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct TtftOptions {
  ModelPreset model;                      // model.layout.tokens_per_chunk fixes the chunk size
  GpuProfile gpu;                         // the compute model (measured or estimated)
  uint64_t context_tokens = 8192;         // saved prefix at a session's first returning turn
  uint32_t turn_tokens = 256;             // new tokens per returning turn
  uint32_t turns = 3;                     // returning turns per session
  uint32_t min_sessions = 4;              // sessions per point: max(concurrency, this)
  uint32_t load_batch_chunks = 16;        // chunks per Store::Load call of one client
  std::vector<uint32_t> concurrency = {1, 4, 8};
  std::vector<std::string> modes = {"recompute", "mem", "file", "fs", "mem+file"};
  std::string dir;                        // parent of the work folder (file://, fs://); empty: $TMPDIR or /tmp
};

// The modes a run may name, in the order of a full run.
const std::vector<std::string>& TtftModeNames();

// Bytes one (mode, concurrency) point holds.
struct TtftFootprint {
  uint64_t sessions = 0;
  uint64_t chunks = 0;         // KV chunks held by the tiers at the end of the point
  uint64_t kv_bytes = 0;       // payload of those chunks
  uint64_t mem_tier_bytes = 0; // mem:// capacity this point needs (0 when it has no mem://)
  uint64_t disk_bytes = 0;     // chunk files on --dir
  uint64_t buffer_bytes = 0;   // the clients' load buffers
  uint64_t MemoryBytes() const { return mem_tier_bytes + buffer_bytes; }
};

// InvalidArgument for an unknown mode, a zero count or an invalid layout.
Status ValidateTtft(const TtftOptions& o);

// Chunks a session holds at the end of its last turn (its full chunks).
uint64_t SessionChunks(const TtftOptions& o);

TtftFootprint FootprintOf(const TtftOptions& o, const std::string& mode, uint32_t concurrency);

// OK when every point fits `available_memory` (memory, with a tenth kept free) and `free_disk` (the
// --dir filesystem). NoSpace otherwise, naming the point that does not fit, what it needs and what it
// has, and what would fit: the highest concurrency at this context, and the longest context (a
// multiple of 1,024 tokens) at these concurrencies.
Status CheckTtftFits(const TtftOptions& o, uint64_t available_memory, uint64_t free_disk);

}  // namespace kvtier::internal
