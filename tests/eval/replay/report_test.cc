#include "eval/replay/report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "eval/replay/plot.h"
#include "eval/replay/replay_test_util.h"

namespace kvtier::internal {
namespace {

// A four-request trace over 2 s; blocks of 4 tokens. Requests 3 and 4 reuse request 1's prefix.
Trace SmallTrace() {
  Trace t;
  t.block_tokens = 4;
  t.requests = {{0, 12, 1, {1, 2, 3}},
                {500, 8, 1, {7, 8}},
                {1500, 10, 1, {1, 2, 9}},
                {2000, 12, 1, {1, 2, 3}}};
  for (const auto& r : t.requests) {
    t.input_tokens += r.input_length;
    t.block_refs += r.hash_ids.size();
  }
  return t;
}

struct Fixture {
  Trace trace = SmallTrace();
  ReplayReport report;

  explicit Fixture(const char* preset = "llama-3.1-8b") {
    auto model = FindModelPreset(preset);
    EXPECT_TRUE(model.ok());
    report.model = *model;
    report.scale = ReplayScale{4, 16, model->layout.BytesPerToken(), model->layout.StateBytes()};
    report.trace = &trace;
    report.trace_path = "small.jsonl";
    report.summary = SummarizeTrace(trace);
    auto gpu = FindGpuProfile("h100");
    EXPECT_TRUE(gpu.ok());
    report.gpus.push_back(*gpu);
    auto replayer = Replayer::Make(trace, report.scale, model->model_id);
    EXPECT_TRUE(replayer.ok());
    ReplayOptions opt;
    auto tier = ParseReplayTier("mem://", report.scale);
    EXPECT_TRUE(tier.ok());
    opt.tiers.push_back(*tier);
    opt.unlimited_blocks = report.summary.unique_blocks;
    auto run = (*replayer)->Run(opt);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    report.runs.push_back(*run);
    for (uint64_t cap : {4u, 8u, 400u}) {
      auto t = WithCapacityTokens(*tier, cap, report.scale);
      EXPECT_TRUE(t.ok());
      opt.tiers = {*t};
      auto r = (*replayer)->Run(opt);
      EXPECT_TRUE(r.ok());
      report.sweep.push_back(ReplaySweepPoint{cap, *r});
    }
    report.sweep_tier = "mem://";
  }
};

TEST(ReplayReportTest, JsonCarriesThePlannersFigures) {
  Fixture f;
  const nlohmann::json j = ReportJson(f.report);
  // Hits: request 3 reuses blocks 1,2 (8 tokens); request 4 reuses all three (12 tokens).
  const uint64_t block_bytes = 4 * f.report.model.layout.BytesPerToken();
  EXPECT_DOUBLE_EQ(j["token_hit_ratio"].get<double>(), 20.0 / 42.0);
  EXPECT_DOUBLE_EQ(j["unlimited_token_hit_ratio"].get<double>(), 20.0 / 42.0);
  EXPECT_EQ(j["unique_blocks"].get<uint64_t>(), 6u);
  EXPECT_EQ(j["footprint_bytes"].get<uint64_t>(), 6 * block_bytes);
  EXPECT_EQ(j["admission"], "always");
  ASSERT_EQ(j["tiers"].size(), 1u);
  EXPECT_EQ(j["tiers"][0]["hit_blocks"].get<uint64_t>(), 5u);
  EXPECT_EQ(j["tiers"][0]["bytes_read"].get<uint64_t>(), 5 * block_bytes);
  EXPECT_EQ(j["tiers"][0]["bytes_written"].get<uint64_t>(), 6 * block_bytes);
  EXPECT_TRUE(j["tiers"][0]["capacity"]["unlimited"].get<bool>());
  // 5 hit blocks over 2 s of arrivals; the busiest second ([2 s, 3 s)) pulls request 4's 3 blocks.
  EXPECT_DOUBLE_EQ(j["bandwidth"]["hit_read_bytes_per_s_mean"].get<double>(),
                   5.0 * block_bytes / 2);
  EXPECT_DOUBLE_EQ(j["bandwidth"]["hit_read_bytes_per_s_peak_1s"].get<double>(), 3.0 * block_bytes);
  const auto& est = j["prefill_saved_estimate"];
  EXPECT_TRUE(est["estimate"].get<bool>());
  ASSERT_EQ(est["gpus"].size(), 1u);
  const double saved = est["gpus"][0]["prefill_gpu_seconds_saved"].get<double>();
  const double want = RecomputeSeconds(f.report.model, f.report.gpus[0], 8) +
                      RecomputeSeconds(f.report.model, f.report.gpus[0], 12);
  EXPECT_DOUBLE_EQ(saved, want);
  EXPECT_EQ(j["wrong_blocks"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["sweep"]["points"].size(), 3u);
  // One block of capacity cannot keep a 3-block prefix; 100 blocks keep everything.
  EXPECT_LT(j["sweep"]["points"][0]["token_hit_ratio"].get<double>(), 20.0 / 42.0);
  EXPECT_DOUBLE_EQ(j["sweep"]["points"][2]["token_hit_ratio"].get<double>(), 20.0 / 42.0);
  EXPECT_NE(ReportText(f.report).find("token hit ratio"), std::string::npos);
}

// A hybrid model: every block carries the state groups once (as every chunk does), and the model needs
// of a hit its per-token bytes plus one state; a classic model needs what it reads.
TEST(ReplayReportTest, HybridBlocksCarryTheirStateAndTheMinimumIsPrinted) {
  Fixture f("qwen3-next-80b-a3b");
  const Layout& l = f.report.model.layout;
  const uint64_t state = 36ull * 1097728;
  EXPECT_EQ(f.report.scale.model_state_bytes_per_block, state);
  const uint64_t block_bytes = 4 * l.BytesPerToken() + state;
  const nlohmann::json j = ReportJson(f.report);
  EXPECT_EQ(j["footprint_bytes"].get<uint64_t>(), 6 * block_bytes);
  EXPECT_EQ(j["tiers"][0]["bytes_read"].get<uint64_t>(), 5 * block_bytes);
  // hits of 8 and 12 tokens over 2 s: per-token bytes of each, one state each
  EXPECT_DOUBLE_EQ(j["bandwidth"]["hit_minimum_bytes_per_s_mean"].get<double>(),
                   (20.0 * l.BytesPerToken() + 2.0 * state) / 2);
  const std::string text = ReportText(f.report);
  EXPECT_NE(text.find("+ 39518208 bytes of state per block"), std::string::npos) << text;
  EXPECT_NE(text.find("of which the model needs"), std::string::npos) << text;
  Fixture classic;
  const nlohmann::json c = ReportJson(classic.report);
  EXPECT_DOUBLE_EQ(c["bandwidth"]["hit_minimum_bytes_per_s_mean"].get<double>(),
                   c["bandwidth"]["hit_read_bytes_per_s_mean"].get<double>());
  EXPECT_EQ(ReportText(classic.report).find("of which the model needs"), std::string::npos);
}

TEST(ReplayReportTest, PlotScriptHoldsTheSweepAndGnuplotDrawsIt) {
  Fixture f;
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  PlotOptions po;
  po.svg_path = dir.path() + "/curve's.svg";  // a quote in the name must survive gnuplot quoting
  po.reference_ratio = 0.66;
  po.reference_label = "published cache ratio";
  const std::string script = SweepPlotScript(f.report, po);
  EXPECT_NE(script.find("4e-06 "), std::string::npos) << script;
  EXPECT_NE(script.find("0.66 with lines"), std::string::npos) << script;
  const Status s = WriteSweepPlot(f.report, po);
  ASSERT_TRUE(s.ok()) << s.ToString() << " (gnuplot-nox is a declared dependency)";
  std::ifstream in(po.svg_path);
  std::stringstream svg;
  svg << in.rdbuf();
  EXPECT_NE(svg.str().find("<svg"), std::string::npos);
  EXPECT_NE(svg.str().find("published cache ratio"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::internal
