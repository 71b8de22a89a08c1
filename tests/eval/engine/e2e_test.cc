// The e2e bench's machinery on `tiny`: every mode runs, tiers give hits, answers equal recompute's.
#include <gtest/gtest.h>

#include "eval/e2e/e2e_bench.h"

namespace kvtier::internal {
namespace {

E2eOptions TinyRun() {
  E2eOptions o;
  o.model = "tiny";
  o.workload.context_tokens = 64;  // 4 chunks of 16
  o.workload.turn_tokens = 5;
  o.workload.output_tokens = 4;
  o.concurrency = {1, 3};
  o.min_sessions = 3;
  o.prefill_step = 32;
  o.blas_threads = 1;
  o.progress = false;
  return o;
}

TEST(E2eBench, EveryModeRunsAndReloadedAnswersEqualRecompute) {
  auto report = RunE2e(TinyRun(), nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->rows.size(), 10u);  // 2 levels x 5 modes
  for (const RowSummary& r : report->rows) {
    EXPECT_TRUE(r.error.empty()) << r.mode << ": " << r.error;
    EXPECT_EQ(r.requests, 3u) << r.mode;
    EXPECT_GT(r.ttft_p50_ms, 0) << r.mode;
    if (r.mode == "recompute") {
      EXPECT_EQ(r.hit_ratio, 0);
      EXPECT_EQ(r.loaded_bytes, 0u);
    } else {
      EXPECT_NEAR(r.hit_ratio, 64.0 / 69.0, 1e-9) << r.mode;  // the whole context, not the new turn
      EXPECT_EQ(r.outputs_checked, 3u) << r.mode;
      EXPECT_GT(r.speedup_p50, 0) << r.mode;
    }
  }
  EXPECT_EQ(report->outputs_checked, 24u);
  EXPECT_EQ(report->outputs_matched, report->outputs_checked);
  EXPECT_NE(MatchLine(*report).find("yes"), std::string::npos);
  EXPECT_NE(FormatTable(*report).find("mem+file"), std::string::npos);
  auto json = ToJson(*report);
  EXPECT_EQ(json["rows"].size(), 10u);
  EXPECT_EQ(json["context_tokens"], 64);
}

TEST(E2eBench, RejectsBadOptions) {
  E2eOptions o = TinyRun();
  o.modes = {"mem", "tape"};
  EXPECT_EQ(RunE2e(o, nullptr).status().code(), Code::kInvalidArgument);
  o = TinyRun();
  o.concurrency = {0};
  EXPECT_EQ(RunE2e(o, nullptr).status().code(), Code::kInvalidArgument);
  o = TinyRun();
  o.model = "nope";
  EXPECT_EQ(RunE2e(o, nullptr).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::internal
