// The rate-step search of `kvtier bench save`: the highest rate at which a Store took every save.
//
// A step offers saves at one target rate for a fixed time and reports what happened (SaveStepOutcome).
// A step passes when nothing was dropped, no Save failed and the feeders kept up (offered at least
// `keep_up` of the target: a caller that could not issue its saves in time is not absorbing them).
// The search starts at `start_rate`; while steps pass it multiplies the rate by `growth`, while they
// fail it divides by it, until one passing and one failing rate bracket the limit; then it bisects
// between them `bisections` times. It stops early when the next step would exceed `max_seconds` of
// measured step time (the first step always runs), when the rate leaves [min_rate, max_rate], or when
// a step cannot be measured (after the first step; the first step's error is returned).
//
// Pure logic over the measurement function, so tests drive it with a fake one. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

struct SaveStepOutcome {
  double target_rate = 0;   // bytes/s the feeders were asked to offer
  double offered_rate = 0;  // bytes/s they gave to Store::Save
  uint64_t dropped = 0;     // StoreStats::dropped_saves of the step
  uint64_t errors = 0;      // Save calls that returned an error
  double seconds = 0;       // wall time of the step, its Flush included
};

struct RateSearchOptions {
  double start_rate = 0;  // bytes/s, > 0
  double growth = 2.0;    // > 1
  uint32_t bisections = 3;
  double max_seconds = 60;         // bound on the sum of the steps' measured seconds
  double first_step_seconds = 0;   // the estimate of a step's time before one was measured
  double keep_up = 0.95;           // a passing step offered at least this fraction of its target
  double min_rate = 1e6;           // bytes/s: below this the search gives up
  double max_rate = 1e13;          // bytes/s: above this it stops raising
};

struct RateSearchResult {
  std::vector<SaveStepOutcome> steps;  // in the order they ran
  // The passing step of the highest target rate (an index into steps), if any passed.
  std::optional<size_t> best;
  std::string stop_reason;  // why the search ended, for the output
};

bool StepPassed(const SaveStepOutcome& step, double keep_up);

using MeasureStepFn = std::function<Result<SaveStepOutcome>(double target_rate)>;

// InvalidArgument for options out of range; the first step's error when it cannot be measured.
Result<RateSearchResult> SearchDropFreeRate(const RateSearchOptions& options, const MeasureStepFn& measure);

}  // namespace kvtier::internal
