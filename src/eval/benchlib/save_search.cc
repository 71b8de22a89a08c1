#include "eval/benchlib/save_search.h"

#include <cmath>
#include <cstdio>

namespace kvtier::internal {
namespace {

std::string RateText(double bytes_per_second) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.3f GB/s", bytes_per_second / 1e9);
  return buf;
}

Status CheckOptions(const RateSearchOptions& o) {
  const bool ok = std::isfinite(o.start_rate) && o.start_rate > 0 && std::isfinite(o.growth) && o.growth > 1 &&
                  std::isfinite(o.max_seconds) && o.max_seconds > 0 && o.keep_up > 0 && o.keep_up <= 1 &&
                  o.min_rate > 0 && o.max_rate >= o.min_rate;
  return ok ? Status::OK() : Status::InvalidArgument("rate search options out of range");
}

// The search's state: the highest passing and the lowest failing target seen.
struct Bracket {
  std::optional<double> pass, fail;
  bool Closed() const { return pass && fail; }
};

}  // namespace

bool StepPassed(const SaveStepOutcome& s, double keep_up) {
  return s.dropped == 0 && s.errors == 0 && s.offered_rate >= keep_up * s.target_rate;
}

Result<RateSearchResult> SearchDropFreeRate(const RateSearchOptions& o, const MeasureStepFn& measure) {
  KVTIER_RETURN_IF_ERROR(CheckOptions(o));
  RateSearchResult r;
  Bracket b;
  double spent = 0, estimate = o.first_step_seconds;
  uint32_t bisected = 0;
  double rate = o.start_rate;
  while (true) {
    if (!r.steps.empty() && spent + estimate > o.max_seconds) {
      r.stop_reason = "time budget: the next step would pass --max-seconds";
      break;
    }
    auto step = measure(rate);
    if (!step.ok()) {
      if (r.steps.empty()) return step.status();
      r.stop_reason = "a step failed: " + step.status().ToString();
      break;
    }
    r.steps.push_back(*step);
    spent += step->seconds;
    estimate = step->seconds;
    const bool passed = StepPassed(*step, o.keep_up);
    if (passed && (!b.pass || rate > *b.pass)) {
      b.pass = rate;
      r.best = r.steps.size() - 1;
    }
    if (!passed && (!b.fail || rate < *b.fail)) b.fail = rate;
    if (b.Closed()) {
      if (bisected == o.bisections) {
        r.stop_reason = "bracketed between " + RateText(*b.pass) + " (no drops) and " + RateText(*b.fail) +
                        " (drops) after " + std::to_string(bisected) + " bisection(s)";
        break;
      }
      ++bisected;
      rate = (*b.pass + *b.fail) / 2;
      continue;
    }
    rate = passed ? rate * o.growth : rate / o.growth;
    if (rate > o.max_rate) {
      r.stop_reason = "no drops up to the highest rate tried";
      break;
    }
    if (rate < o.min_rate) {
      r.stop_reason = "drops at every rate down to " + RateText(rate * o.growth);
      break;
    }
  }
  return r;
}

}  // namespace kvtier::internal
