#include "eval/benchlib/report.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/benchlib/process.h"
#include "eval/benchlib/results.h"

namespace kvtier::internal {
namespace {

nlohmann::json Datapath(uint64_t chunk_bytes) {
  DatapathResult r;
  r.target.url = "file:///nvme/kv";
  r.target.cold_method = "O_DIRECT";
  r.model_preset = "llama-3.1-8b";
  r.layout = "32x8x128 bf16";
  r.chunk_bytes = chunk_bytes;
  r.bytes_per_token = 128 << 10;
  r.context_tokens = 32768;
  for (uint64_t depth : {1, 4}) {
    SweepPoint p;
    p.inflight_bytes = depth * chunk_bytes;
    p.kvtier = {16, 16 * chunk_bytes, 1.0 / depth, 0, 100, 200};
    FioResult f;
    f.bytes_per_second = 1e9 * depth;
    p.fio = f;
    r.sweep.push_back(p);
  }
  r.serial_pread = PhaseResult{16, 16 * chunk_bytes, 2.0, 0, 0, 0};
  auto gpu = FindGpuProfile("h200");
  EXPECT_TRUE(gpu.ok());
  r.gpu = *gpu;
  return ToJson(r);
}

nlohmann::json E2e() {
  return nlohmann::json::parse(R"({"bench": "e2e", "model_id": "tiny", "rows": [
    {"mode": "recompute", "concurrency": 1, "ttft_p50_ms": 900, "ttft_p99_ms": 1000},
    {"mode": "file", "concurrency": 1, "ttft_p50_ms": 100, "ttft_p99_ms": 150},
    {"mode": "recompute", "concurrency": 8, "ttft_p50_ms": 5000, "ttft_p99_ms": 7000},
    {"mode": "file", "concurrency": 8, "ttft_p50_ms": 400, "ttft_p99_ms": 600}]})");
}

ReportInputs Inputs() {
  ReportInputs in;
  in.datapath = {{"a.json", Datapath(2ull << 20)}, {"b.json", Datapath(32ull << 20)}};
  in.e2e = {{"e2e.json", E2e()}};
  return in;
}

TEST(ReportTest, PlotsCoverInflightChunkSizeAndTtft) {
  const auto plots = ReportPlots(Inputs());
  ASSERT_EQ(plots.size(), 3u);
  EXPECT_EQ(plots[0].name, "bandwidth_vs_inflight");
  EXPECT_EQ(plots[0].series.size(), 4u);  // kvtier + fio per run
  EXPECT_EQ(plots[1].name, "bandwidth_vs_chunk");
  ASSERT_FALSE(plots[1].series.empty());
  ASSERT_EQ(plots[1].series[0].points.size(), 2u);  // both chunk sizes of one target
  EXPECT_LT(plots[1].series[0].points[0].first, plots[1].series[0].points[1].first);
  EXPECT_EQ(plots[2].name, "ttft_vs_concurrency");
  EXPECT_EQ(plots[2].series.size(), 4u);  // p50 and p99 per mode
  EXPECT_EQ(plots[2].series[0].points.size(), 2u);
}

TEST(ReportTest, GnuplotScriptIsSelfContained) {
  PlotSpec p{"x", "it's a title", "bytes", "GB/s", true, {{"a", {{1, 2}, {2, 3}}, 1, true}}};
  const std::string gp = GnuplotScript(p, "x.svg");
  EXPECT_NE(gp.find("set terminal svg"), std::string::npos);
  EXPECT_NE(gp.find("set output 'x.svg'"), std::string::npos);
  EXPECT_NE(gp.find("'it''s a title'"), std::string::npos);
  EXPECT_NE(gp.find("$d0 << EOD\n1 2\n2 3\nEOD"), std::string::npos) << gp;
  EXPECT_NE(gp.find("dt 2"), std::string::npos);
  EXPECT_NE(gp.find("logscale x 2"), std::string::npos);
}

TEST(ReportTest, MarkdownHasTheTableAndEmbedsEveryChart) {
  const ReportInputs in = Inputs();
  const std::string md = ReportMarkdown(in, ReportPlots(in), "kvtier report a.json --out d");
  EXPECT_NE(md.find("| Target |"), std::string::npos);
  EXPECT_NE(md.find("(est.)"), std::string::npos);
  EXPECT_NE(md.find("![Cold read bandwidth against bytes in flight](bandwidth_vs_inflight.svg)"),
            std::string::npos);
  EXPECT_NE(md.find("(ttft_vs_concurrency.svg)"), std::string::npos);
  EXPECT_NE(md.find("| file | 8 |"), std::string::npos) << md;
}

// The sweep table says how many of a row's errors were chunks read with the wrong bytes (issue 39: the
// bench counted both as one figure); results written before the field have no such words.
TEST(ReportTest, SweepErrorsNameTheChunksReadWithWrongBytes) {
  ReportInputs in = Inputs();
  nlohmann::json& point = in.datapath[0].second["sweep"][1]["kvtier"];
  point["errors"] = uint64_t{3};
  point["wrong_bytes"] = uint64_t{2};
  in.datapath[1].second["sweep"][0]["kvtier"].erase("wrong_bytes");
  const std::string md = ReportMarkdown(in, ReportPlots(in), "kvtier report a.json b.json --out d");
  EXPECT_NE(md.find("| 3 (2 wrong bytes) |"), std::string::npos) << md;
  EXPECT_EQ(md.find("(0 wrong bytes)"), std::string::npos) << md;
}

TEST(ReportTest, LoadRejectsUnknownJsonAndWriteDrawsSvgs) {
  char tmpl[] = "/tmp/kvtier-report-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  std::ofstream(dir / "dp.json") << Datapath(32ull << 20).dump();
  std::ofstream(dir / "other.json") << R"({"hello": 1})";
  EXPECT_EQ(LoadReportInputs({(dir / "other.json").string()}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(LoadReportInputs({(dir / "missing.json").string()}).status().code(), Code::kNotFound);
  auto in = LoadReportInputs({(dir / "dp.json").string()});
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ReportOptions options;
  options.out_dir = (dir / "out").string();
  options.run_gnuplot = OnPath("gnuplot");
  auto written = WriteReport(*in, options);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "report.md"));
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "bandwidth_vs_inflight.gp"));
  if (options.run_gnuplot) {
    std::ifstream svg(dir / "out" / "bandwidth_vs_inflight.svg");
    std::stringstream text;
    text << svg.rdbuf();
    EXPECT_NE(text.str().find("<svg"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier::internal
