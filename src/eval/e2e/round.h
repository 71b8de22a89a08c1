// One measured round of the e2e bench: `concurrency` closed-loop clients replay returning sessions
// against one engine (and its store, if any) through a DeviceLoop, and every request's timing is kept.
// Thread-safety: RunRound is self-contained; the engine must not be used by others meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "eval/e2e/workload.h"
#include "eval/engine/engine.h"

namespace kvtier::internal {

struct RequestRecord {
  uint32_t session = 0;
  double ttft_s = 0;       // from submission (before lookup) to the first output token
  double load_s = 0;       // Lookup + Load inside the TTFT
  double total_s = 0;      // submission to the last output token
  uint32_t prompt_tokens = 0, loaded_tokens = 0, computed_tokens = 0, output_tokens = 0;
  uint64_t loaded_bytes = 0;
  std::vector<uint32_t> output;
};

struct RoundResult {
  std::string mode;
  uint32_t concurrency = 0;
  double wall_s = 0;
  std::vector<RequestRecord> requests;
  std::string error;  // first failure, empty when every request succeeded
};

// Called about once a second from the round's thread with (done, total) requests.
using ProgressFn = std::function<void(uint32_t done, uint32_t total)>;

// Runs sessions [0, sessions) through `engine` with `concurrency` clients.
RoundResult RunRound(Engine& engine, const WorkloadOptions& w, const std::string& mode,
                     uint32_t sessions, uint32_t concurrency, const ProgressFn& progress);

}  // namespace kvtier::internal
