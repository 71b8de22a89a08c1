// `kvtier stats --prometheus --target URL` end to end: the real executable's output over a file:// tier
// passes the strict parser and reports the chunks stored; the tier is left as it was.
#include <gtest/gtest.h>

#include <filesystem>

#include "tiers/file/file_test_util.h"
#include "hostile/cli_runner.h"
#include "kvtier/metrics.h"
#include "metrics/prom_parser.h"

namespace kvtier::testing {
namespace {

// Opens `url` and stores chunks 0..n-1 of `ns` in it; the tier, or nullptr after a failed check.
std::unique_ptr<Tier> OpenWithChunks(const std::string& url, const Namespace& ns, uint32_t n) {
  auto tier = OpenTier(url);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  if (!tier.ok()) return nullptr;
  for (uint32_t i = 0; i < n; ++i) {
    auto payload = PayloadFor(KeyNo(ns, i), ns.layout().BytesPerChunk());
    OnePiece p(payload);
    const Status s = (*tier)->Put(ChunkId::Of(ns, KeyNo(ns, i)), p.src());
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return nullptr;
  }
  return std::move(tier).value();
}

TEST(StatsCliTest, PrometheusOutputParses) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string url = "file://" + dir.path() + "?capacity=1MiB";
  const Namespace ns = TestNamespace();
  ASSERT_NE(OpenWithChunks(url, ns, 3), nullptr);
  const auto before = std::filesystem::last_write_time(dir.path());
  const std::string log = dir.path() + "/../" + std::filesystem::path(dir.path()).filename().string() + ".log";
  const hostile::CliResult run = hostile::RunKvtier({"stats", "--prometheus", "--target", url}, log);
  std::filesystem::remove(log);
  ASSERT_TRUE(run.exited && run.exit_code == 0) << hostile::Describe(run);
  auto parsed = ParsePrometheusText(run.output);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << run.output;
  const PromLabels tier = {{"tier", MetricsTierLabel(url)}};
  EXPECT_EQ(parsed->Value("kvtier_tier_chunks", tier), 3);
  EXPECT_EQ(parsed->Value("kvtier_tier_capacity_bytes", tier), 1 << 20);
  EXPECT_EQ(parsed->Value("kvtier_tier_corrupt_chunks_total", tier), 0);
  EXPECT_EQ(parsed->families.at("kvtier_tier_get_latency_seconds").type, "histogram");
  EXPECT_EQ(std::filesystem::last_write_time(dir.path()), before);  // looking changed nothing

  // --json and --prometheus together are refused.
  const hostile::CliResult both = hostile::RunKvtier({"stats", "--prometheus", "--json", "--target", url}, log);
  std::filesystem::remove(log);
  EXPECT_TRUE(both.exited && both.exit_code != 0) << hostile::Describe(both);
}

// shm:// adds chunks and bytes per namespace, from the shared slots, to the table, JSON and Prometheus text.
TEST(StatsCliTest, ShmShowsUsagePerNamespace) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string url = "shm://statsns?dir=" + dir.path() + "&capacity=4MiB";
  const Namespace ns = TestNamespace();
  const std::unique_ptr<Tier> tier = OpenWithChunks(url, ns, 2);
  ASSERT_NE(tier, nullptr);
  const uint64_t usage = tier->Stats().usage_bytes;
  const std::string log = dir.path() + "/stats.log";
  const hostile::CliResult prom = hostile::RunKvtier({"stats", "--prometheus", "--target", url}, log);
  ASSERT_TRUE(prom.exited && prom.exit_code == 0) << hostile::Describe(prom);
  auto parsed = ParsePrometheusText(prom.output);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << prom.output;
  // The tier label is of the URL as the tier spells it (parameters in order).
  const PromLabels labels = {{"tier", MetricsTierLabel(tier->url())}, {"namespace", ns.Hex().substr(0, 16)}};
  EXPECT_EQ(parsed->Value("kvtier_tier_namespace_chunks", labels), 2) << prom.output;
  EXPECT_EQ(parsed->Value("kvtier_tier_namespace_usage_bytes", labels), static_cast<double>(usage));
  const hostile::CliResult json = hostile::RunKvtier({"stats", "--json", "--target", url}, log);
  ASSERT_TRUE(json.exited && json.exit_code == 0) << hostile::Describe(json);
  EXPECT_NE(json.output.find("\"namespace\": \"" + ns.Hex() + "\""), std::string::npos) << json.output;
  const hostile::CliResult table = hostile::RunKvtier({"stats", "--target", url}, log);
  ASSERT_TRUE(table.exited && table.exit_code == 0) << hostile::Describe(table);
  EXPECT_NE(table.output.find(ns.Hex() + "  chunks 2  bytes " + std::to_string(usage)), std::string::npos)
      << table.output;
}

}  // namespace
}  // namespace kvtier::testing
