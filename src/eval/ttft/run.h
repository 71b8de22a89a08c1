// One (mode, concurrency) point of `kvtier bench ttft`, and the whole run.
//
// A point: `concurrency` client threads; client i serves sessions i, i + concurrency, ..., all turns of
// a session in order (closed loop, no think time). Per returning turn it
//   1. Lookup()s the saved prefix and Load()s it for real, through the Store, in batches of
//      load_batch_chunks chunks into its own aligned buffer (a GPU's staging area; every chunk is
//      verified by the Store) - recompute mode skips this;
//   2. books the prefill of the tokens not loaded on the instance's SimGpu (ttft/sim_gpu.h): it starts
//      when the GPU is free and the load is done, and lasts PrefillSeconds(cached, uncached) of the
//      GPU profile; the client sleeps until it ends: that instant minus the turn's arrival is its TTFT;
//   3. saves the prompt's new full chunks through Store::Save (real bytes), for the next turn, and
//      waits for the store's background writes (Store::Flush) before its next turn, as a user's next
//      message comes after the answer. Neither is part of any TTFT.
// Before a point, every session's first-turn prefix is written straight into the tiers (Tier::Put;
// mem+file: all into file://, the later half also into mem://), the store is flushed and, for
// directories, the page cache of its files is dropped so the first loads are cold.
//
// Thread-compatible: one run at a time per --dir.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/store.h"
#include "progress/progress.h"
#include "eval/ttft/plan.h"
#include "eval/ttft/sim_gpu.h"

namespace kvtier::internal {

// One returning turn; times are seconds on the point's clock.
struct TurnRecord {
  uint32_t session = 0, turn = 0;
  double arrival = 0, ready = 0, start = 0, end = 0;  // ready: load done; start/end: on the GPU
  double load_s = 0;
  uint64_t load_bytes = 0, cached_tokens = 0, new_tokens = 0;
  uint64_t min_bytes = 0;       // what the model needs of the loaded prefix (window layers: the last W tokens)
  uint64_t missing_chunks = 0;  // saved chunks that Lookup or Load did not deliver (recomputed)
  double compute_s = 0;
  double Ttft() const { return end - arrival; }
  double QueueSeconds() const { return start - ready; }
};

struct PointResult {
  std::string mode;
  uint32_t concurrency = 0;
  uint32_t sessions = 0;
  double wall_s = 0;
  double gpu_busy_s = 0;
  std::vector<TurnRecord> turns;
  uint64_t load_bytes_skipped = 0;  // of the turns' load_bytes, those the Store did not read (StoreStats)
  std::string error;  // the first failure of a client (its turns are missing from `turns`)
};

// Runs one point against `store` (null for recompute; its tiers already hold every session's first
// prefix). `progress` may be null.
PointResult RunPoint(const TtftOptions& o, const std::string& mode, uint32_t concurrency, Store* store,
                     TtftClock& clock, ProgressReporter* progress);

// Puts every session's first-turn prefix into the store's tiers (see above) and flushes.
Status PopulatePoint(const TtftOptions& o, const std::string& mode, uint32_t sessions, Store& store);

// Tier URLs of `mode` with directories under `dir`, sized for `fp`.
std::vector<std::string> TtftTierUrls(const std::string& mode, const std::string& dir, const TtftFootprint& fp);

// Every mode at every concurrency, in order; checks the fit first (CheckTtftFits against this host's
// available memory and the free space of --dir) and fails with its NoSpace before writing anything.
Result<std::vector<PointResult>> RunTtft(const TtftOptions& o, ProgressReporter* progress);

}  // namespace kvtier::internal
