// The capacity planner's answers, computed from replay runs: hit ratios, bytes per tier at the size
// of the chosen model, the bandwidth the hits need at the trace's arrival rate, and an ESTIMATE of
// the prefill compute the hits save on each GPU profile. Written as JSON and as a short text
// summary.
//
// Byte figures are at model size: a replayed block stands for block_tokens x the model's KV bytes
// per token, whatever the scaled payload was. Storage moves whole chunks, so bytes count whole
// blocks (a request's partial last block as a full one); hit ratios count tokens (min(k x block,
// input)).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/gpuprofile/gpu_profile.h"
#include "kvtier/layout.h"
#include "eval/replay/replay_tier.h"
#include "eval/replay/replayer.h"
#include "eval/replay/trace.h"
#include "eval/replay/trace_stats.h"

namespace kvtier::internal {

struct ReplaySweepPoint {
  uint64_t capacity_tokens = 0;
  ReplayRun run;
};

// Wall times of the steps before the replay, measured in the same run as a reference for its rate.
struct ReplayTimings {
  double load_trace_s = 0;
  double derive_keys_s = 0;  // SHA-256 chained keys of every block reference
  double summarize_s = 0;    // the hash-set pass that gives the unlimited-capacity figures
};

struct ReplayReport {
  std::string trace_path;
  const Trace* trace = nullptr;  // not owned
  TraceSummary summary;
  ReplayScale scale;
  ModelPreset model;
  std::vector<GpuProfile> gpus;
  std::vector<ReplayRun> runs;  // the configured tiers, one run per admission policy compared
  std::string sweep_tier;       // URL of the tier whose capacity the sweep varies
  std::vector<ReplaySweepPoint> sweep;
  ReplayTimings timings;
};

std::string_view AdmissionName(Admission a);  // "always" (plain LRU) or "second-use"

nlohmann::json ReportJson(const ReplayReport& report);
std::string ReportText(const ReplayReport& report);

}  // namespace kvtier::internal
