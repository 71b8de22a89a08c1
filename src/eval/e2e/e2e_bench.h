// `kvtier bench e2e`: the cold-recovery benchmark, end to end through the reference engine.
//
// RunE2e first plays turn 1 of every session (prefill of its context, saved to file://), then, for each
// concurrency level and each mode, opens that mode's store, fills its tiers with the saved chunks, starts
// a fresh engine (empty pool: every session's KV was evicted) and replays the returning sessions.
// Recompute runs first at each level: it is the reference for both the speedup and the outputs (every
// other mode's greedy answer must equal recompute's answer for the same session).
//
// Thread-safety: one RunE2e at a time per directory. Failure: InvalidArgument for bad options, the
// store's or engine's error when one cannot be opened; a failing request is reported in the round.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/e2e/round.h"
#include "eval/e2e/workload.h"

namespace kvtier::internal {

// Ranges of the options (checked by RunE2e and by the flags of `kvtier bench e2e`).
inline constexpr uint32_t kMaxE2eConcurrency = 1024;
inline constexpr uint32_t kMaxE2eTokens = 1u << 24;       // context, turn, prefill step
inline constexpr uint32_t kMaxE2eOutputTokens = 1u << 20;
inline constexpr uint32_t kMaxE2eSessions = 1u << 16;

struct E2eOptions {
  std::string model = "small";
  uint64_t model_seed = 1;
  WorkloadOptions workload;                     // vocab is taken from the model
  std::vector<uint32_t> concurrency = {1, 8, 16, 32};
  std::vector<std::string> modes = AllModeNames();
  uint32_t min_sessions = 4;   // sessions per level: max(concurrency, min_sessions)
  uint64_t pool_bytes = 0;     // engine KV pool; 0: room for the largest concurrency level
  std::string dir;             // parent of the run's work folder (file:// and fs:// live in it, removed
                               // after; core/work_dir.h); empty: the temp directory ($TMPDIR or /tmp)
  uint32_t prefill_step = 512; // tokens per chunked-prefill step
  int blas_threads = 0;        // 0: OpenBLAS default (one per core)
  bool progress = true;        // progress lines on the log stream
};

struct RowSummary {
  std::string mode;
  uint32_t concurrency = 0, requests = 0;
  double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
  double output_tokens_per_s = 0;
  double hit_ratio = 0;        // prompt tokens loaded / prompt tokens
  uint64_t loaded_bytes = 0;
  double load_share = 0;       // sum of load time / sum of TTFT
  double load_gbps = 0;        // bytes loaded / time spent loading (per request, summed)
  double load_p50_ms = 0;
  double speedup_p50 = 0;      // recompute TTFT p50 / this TTFT p50 (0 when no recompute row)
  uint32_t outputs_checked = 0, outputs_matched = 0;
  std::string error;
};

struct E2eReport {
  E2eOptions options;
  std::string model_id;
  uint64_t chunk_bytes = 0;
  uint32_t tokens_per_chunk = 0;
  double populate_s = 0;
  std::vector<RowSummary> rows;
  uint32_t outputs_checked = 0, outputs_matched = 0;
};

// Progress and phase lines go to `log` (may be null).
Result<E2eReport> RunE2e(const E2eOptions& options, std::ostream* log);

// The row of one round (speedup and output checks are filled in by RunE2e).
RowSummary Summarize(const RoundResult& round);
std::string FormatTable(const E2eReport& report);
nlohmann::json ToJson(const E2eReport& report);
// "reloaded output matched recompute: yes (N of N requests)" or says which did not.
std::string MatchLine(const E2eReport& report);

}  // namespace kvtier::internal
