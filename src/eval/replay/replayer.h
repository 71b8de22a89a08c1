// Replays a request trace through the real Store: same keys, same tiers, same eviction and
// admission code as an engine would drive, with payloads scaled down (replay_tier.h) so a whole
// trace fits.
//
// For each request, in arrival order, the replayer does what an engine does: Lookup the chained
// keys of its blocks, Load the leading hits, then Save every block after the loaded prefix (the
// engine has just recomputed them). It then waits for the Store's background writes (Flush) so
// lower tiers see the same state at every request whatever the speed of the machine: the replay
// models a store whose background work keeps up, and its results are deterministic.
//
// Each loaded block's bytes are compared with what was saved; a mismatch is counted, never ignored.
//
// Thread-safety: a Replayer is immutable after construction; Run may be called from several threads
// (each run opens its own Store and its own directories).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/keys.h"
#include "kvtier/store.h"
#include "eval/replay/belady.h"
#include "eval/replay/replay_tier.h"
#include "eval/replay/trace.h"

namespace kvtier::internal {

struct ReplayOptions {
  std::vector<ReplayTier> tiers;  // fastest first
  Admission admission = Admission::kAlways;
  // Capacity handed to unlimited tiers, in blocks: the trace's distinct blocks, so nothing is
  // evicted.
  uint64_t unlimited_blocks = 0;
};

struct TierReplayResult {
  std::string url;  // as the user wrote it
  bool unlimited = true;
  uint64_t capacity_blocks = 0;
  uint64_t stored_block_bytes = 0;  // what the capacity scaling assumed one block occupies
  uint64_t hit_blocks = 0;  // loaded blocks this tier served (the fastest tier holding each)
  uint64_t hit_tokens = 0;
  TierStats stats;  // the tier's own counters, in scaled bytes
  BeladyResult belady;  // the offline optimum (belady.h) of one tier of this capacity alone
};

struct ReplayRun {
  Admission admission = Admission::kAlways;
  uint64_t requests = 0;
  uint64_t input_tokens = 0;
  uint64_t block_refs = 0;
  uint64_t hit_blocks = 0;
  uint64_t hit_tokens = 0;
  uint64_t saved_blocks = 0;  // blocks handed to Save (recomputed by the engine)
  uint64_t wrong_blocks = 0;  // loaded blocks whose bytes differ from those saved: must stay 0
  std::vector<TierReplayResult> tiers;
  std::vector<uint32_t> hit_blocks_per_request;  // in trace order
  StoreStats store;
  double seconds = 0;  // wall time of the replay loop
  // The offline optimum (belady.h) at the tiers' combined capacity: no arrangement of these tiers
  // holds more distinct blocks, so it is the limit the run is measured against.
  BeladyResult belady;

  double TokenHitRatio() const {
    return input_tokens ? static_cast<double>(hit_tokens) / input_tokens : 0.0;
  }
};

class RunDirs;
struct RequestBuffers;

class Replayer {
 public:
  // Derives the chained chunk keys of every request: a namespace for `model_id` over the scaled
  // layout, and key[j] = NextChunkKey(ns, key[j-1], {hash_ids[j]}). InvalidArgument for a bad
  // scale.
  static Result<std::unique_ptr<Replayer>> Make(const Trace& trace, const ReplayScale& scale,
                                                std::string_view model_id);

  // Replays the whole trace through a fresh Store over `options.tiers`. Tiers kept in files get a
  // new directory under their path, removed afterwards. Errors from opening the store, or from a
  // Load or Save that fails outright (a miss is not an error).
  Result<ReplayRun> Run(const ReplayOptions& options) const;

  const Namespace& ns() const { return ns_; }
  std::span<const ChunkKey> KeysOf(size_t request) const;

 private:
  Replayer(const Trace& trace, const ReplayScale& scale, Namespace ns)
      : trace_(trace), scale_(scale), ns_(std::move(ns)) {}

  Result<std::unique_ptr<Store>> OpenStore(const ReplayOptions& options, RunDirs* dirs) const;
  // Lookup, Load and check the leading hits of request `i`, then Save the rest; adds to `run`.
  Status ReplayRequest(size_t i, Store& store, RequestBuffers& buf, ReplayRun* run) const;
  // Fills the offline optimum of each tier alone and of the tiers together.
  void AddBelady(const ReplayOptions& options, ReplayRun* run) const;

  const Trace& trace_;  // not owned; must outlive the Replayer
  ReplayScale scale_;
  Namespace ns_;
  std::vector<ChunkKey> keys_;   // every request's keys, back to back
  std::vector<size_t> offsets_;  // request i owns keys_[offsets_[i], offsets_[i + 1])
};

}  // namespace kvtier::internal
