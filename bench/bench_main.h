// A main for kvtier benchmarks that prints, after the usual table, each figure against its reference
// from the same run (e.g. Load throughput as a share of a plain memcpy of the same bytes) and whether
// it meets its target. Pass --benchmark_out=FILE.json for machine-readable results.
//
// With --benchmark_repetitions=N the summary uses medians.
// Figures compare CPU time of the benchmark thread: on a shared build machine wall time mostly measures
// other processes. Wall-time ratios are printed beside them; on an idle machine the two agree.
#pragma once

#include "kvtier/keys.h"

#include <numeric>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace kvtier::bench {

// The keys of `chunks` chunks of consecutive token ids starting at `first_token`.
inline std::vector<ChunkKey> SequentialKeys(const Namespace& ns, uint32_t first_token, int64_t chunks) {
  std::vector<uint32_t> tokens(static_cast<size_t>(chunks) * ns.layout().tokens_per_chunk);
  std::iota(tokens.begin(), tokens.end(), first_token);
  return ComputeChunkKeys(ns, tokens);
}

struct Comparison {
  enum Kind { kTimeAtMost, kRatioAtMost, kThroughputAtLeast };
  Kind kind;
  std::string figure;     // benchmark name, e.g. "BM_LoadMem/4"
  std::string reference;  // benchmark name of the reference; unused for kTimeAtMost
  double limit;           // seconds (kTimeAtMost), time ratio figure/reference, or throughput share
  std::string what;       // one line for the summary
};

class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.iterations == 0) continue;
      // With --benchmark_repetitions the median stands for the benchmark; otherwise its single run.
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type != Run::RT_Iteration && !median) continue;
      if (!median && r.repetitions > 1) continue;
      const double n = static_cast<double>(r.iterations);
      cpu_[r.run_name.str()] = r.cpu_accumulated_time / n;
      real_[r.run_name.str()] = r.real_accumulated_time / n;
    }
  }

  void PrintSummary(const std::vector<Comparison>& comparisons) const {
    std::printf("\nsummary (same run):\n");
    for (const Comparison& c : comparisons) {
      auto f = cpu_.find(c.figure), r = cpu_.find(c.reference);
      if (f == cpu_.end() || (c.kind != Comparison::kTimeAtMost && r == cpu_.end())) {
        std::printf("  %-40s not run\n", c.what.c_str());
        continue;
      }
      double value = 0;
      bool pass = false;
      switch (c.kind) {
        case Comparison::kTimeAtMost:
          value = f->second * 1e3;
          pass = f->second <= c.limit;
          std::printf("  %-40s %.3f ms cpu (target <= %.3f ms) %s   [wall %.3f ms]\n", c.what.c_str(),
                      value, c.limit * 1e3, pass ? "PASS" : "MISS", real_.at(c.figure) * 1e3);
          break;
        case Comparison::kRatioAtMost:
          value = f->second / r->second;
          pass = value <= c.limit;
          std::printf("  %-40s %.3fx of %s, cpu (target <= %.2fx) %s   [wall %.3fx]\n",
                      c.what.c_str(), value, c.reference.c_str(), c.limit, pass ? "PASS" : "MISS",
                      real_.at(c.figure) / real_.at(c.reference));
          break;
        case Comparison::kThroughputAtLeast:
          value = r->second / f->second;
          pass = value >= c.limit;
          std::printf("  %-40s %.1f%% of %s, cpu (target >= %.0f%%) %s   [wall %.1f%%]\n",
                      c.what.c_str(), value * 100, c.reference.c_str(), c.limit * 100,
                      pass ? "PASS" : "MISS", 100 * real_.at(c.reference) / real_.at(c.figure));
          break;
      }
    }
  }

 private:
  std::map<std::string, double> cpu_, real_;  // seconds per iteration
};

inline int RunBenchmarks(int argc, char** argv, const std::vector<Comparison>& comparisons) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary(comparisons);
  benchmark::Shutdown();
  return 0;
}

}  // namespace kvtier::bench
