// Results of `kvtier bench ttft`: per (mode, concurrency) TTFT percentiles, the speedup over
// recompute, the measured load bandwidth and the break-even bandwidth; their JSON form (schema
// "kvtier.bench.ttft/1", keys in docs/ttft.md) and the table a user reads. Every output names the GPU
// profile the compute is modelled from.
// Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/ttft/plan.h"
#include "eval/ttft/run.h"

namespace kvtier::internal {

inline constexpr const char* kTtftSchema = "kvtier.bench.ttft/1";

struct TtftRow {
  std::string mode;
  uint32_t concurrency = 0, sessions = 0, turns = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0;
  std::optional<double> speedup_p50;  // recompute's p50 / this p50 at the same concurrency
  double load_gbps = 0;               // bytes loaded / time spent loading, per request (0: no loads)
  double aggregate_load_gbps = 0;     // bytes loaded / the point's wall time
  double queue_p50_ms = 0;            // waiting for the GPU after the load was done
  double compute_p50_ms = 0;          // modelled GPU time per turn
  double gpu_busy = 0;                // fraction of the point's wall time the GPU computed
  uint64_t load_bytes = 0, missing_chunks = 0;
  uint64_t read_bytes = 0;            // of load_bytes, those read (window layers' skipped bytes are not)
  uint64_t min_bytes = 0;             // what the model needs of the loaded prefixes
  double mean_cached_tokens = 0;
};

// Per context length a turn presents (context + t x turn_tokens): the bandwidth at which loading its
// saved prefix takes as long as the prefill it saves, from the profile.
struct BreakEven {
  uint64_t context_tokens = 0;  // the saved prefix
  uint64_t prompt_tokens = 0;
  double recompute_s = 0, with_cache_s = 0;
  double break_even_gbps = 0;   // prefix bytes / (recompute_s - with_cache_s), 1e9 bytes/s
};

std::vector<TtftRow> SummarizeTtft(const TtftOptions& o, const std::vector<PointResult>& points);
std::vector<BreakEven> BreakEvens(const TtftOptions& o);

// Nearest-rank percentile (q in [0, 1]) of `v`; 0 for an empty vector.
double Percentile(std::vector<double> v, double q);

// "compute modelled from GPU profile h200: MEASURED 2026-12-01 on ...".
std::string ComputeModelNote(const TtftOptions& o);

nlohmann::json TtftJson(const TtftOptions& o, const std::vector<TtftRow>& rows, const std::string& started_at,
                        const std::string& host);
std::string FormatTtftTable(const TtftOptions& o, const std::vector<TtftRow>& rows);

}  // namespace kvtier::internal
