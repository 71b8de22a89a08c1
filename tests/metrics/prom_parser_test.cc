// The test parser itself: it accepts a valid exposition using every feature kvtier relies on, and
// rejects each one-line corruption of it, naming the rule broken. A checker that cannot fail proves
// nothing about the text it passes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "metrics/prom_parser.h"

namespace kvtier::testing {
namespace {

const std::string kValid =
    "# HELP demo_requests_total Requests, with a \\\\ and a \\n in the help.\n"
    "# TYPE demo_requests_total counter\n"
    "demo_requests_total{path=\"/a\\\"b\\\\c\\nd\",code=\"200\"} 1027 1395066363000\n"
    "demo_requests_total{path=\"/x\",code=\"400\",} 3\n"
    "\n"
    "# a plain comment\n"
    "# TYPE demo_temperature gauge\n"
    "demo_temperature -1.5e3\n"
    "# TYPE demo_ratio gauge\n"
    "demo_ratio{k=\"a\"} NaN\n"
    "demo_ratio{k=\"b\"} +Inf\n"
    "demo_ratio{k=\"c\"} -Inf\n"
    "demo_ratio{k=\"d\"} .5\n"
    "# TYPE demo_latency_seconds histogram\n"
    "demo_latency_seconds_count{op=\"get\"} 5\n"
    "demo_latency_seconds_sum{op=\"get\"} 0.75\n"
    "demo_latency_seconds_bucket{op=\"get\",le=\"0.1\"} 1\n"
    "demo_latency_seconds_bucket{op=\"get\",le=\"1\"} 4\n"
    "demo_latency_seconds_bucket{op=\"get\",le=\"+Inf\"} 5\n"
    "# TYPE demo_rpc_seconds summary\n"
    "demo_rpc_seconds{quantile=\"0.5\"} 0.05\n"
    "demo_rpc_seconds_sum 1.5\n"
    "demo_rpc_seconds_count 20\n";

TEST(PromParserTest, AcceptsAValidExposition) {
  auto parsed = ParsePrometheusText(kValid);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->families.at("demo_requests_total").help, "Requests, with a \\ and a \n in the help.");
  EXPECT_EQ(parsed->Value("demo_requests_total", {{"path", "/a\"b\\c\nd"}, {"code", "200"}}), 1027.0);
  EXPECT_EQ(parsed->Samples("demo_requests_total")[0].timestamp_ms, 1395066363000);
  EXPECT_EQ(parsed->Value("demo_temperature"), -1500.0);
  EXPECT_TRUE(std::isnan(*parsed->Value("demo_ratio", {{"k", "a"}})));
  EXPECT_EQ(parsed->Value("demo_ratio", {{"k", "b"}}), HUGE_VAL);
  EXPECT_EQ(parsed->Value("demo_ratio", {{"k", "c"}}), -HUGE_VAL);
  EXPECT_EQ(parsed->Value("demo_latency_seconds_bucket", {{"op", "get"}, {"le", "1"}}), 4.0);
  EXPECT_EQ(parsed->families.at("demo_latency_seconds").type, "histogram");
  EXPECT_EQ(ParsePrometheusText("").ok(), true);  // an empty exposition is valid
}

// `kValid` with its first occurrence of `from` replaced by `to`.
std::string Mutate(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(PromParserTest, RejectsEachMalformation) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"L1", kValid.substr(0, kValid.size() - 1)},
      {"L1", Mutate("demo_temperature -1.5e3\n", "demo_temperature -1.5e3\r\n")},
      {"C1", Mutate("# HELP demo_requests_total Requests, with a \\\\", "# HELP demo_requests_total Requests \\t")},
      {"C1", Mutate("# HELP demo_requests_total", "# HELP 9demo")},
      {"C1", Mutate("# TYPE demo_temperature gauge\n", "# TYPE demo_temperature gauge\n# HELP demo_temperature a\n# HELP demo_temperature b\n")},
      {"C2", Mutate("# TYPE demo_temperature gauge", "# TYPE demo_temperature gauges")},
      {"C2", Mutate("# TYPE demo_temperature gauge", "# TYPE demo_temperature gauge extra")},
      {"C2", Mutate("# TYPE demo_temperature gauge\n", "# TYPE demo_temperature gauge\n# TYPE demo_temperature gauge\n")},
      {"S1", Mutate("demo_temperature -1.5e3", "demo-temperature -1.5e3")},
      {"S1", Mutate("{path=\"/x\",code", "{path=\"/x\", code")},
      {"S1", Mutate("{path=\"/x\",code", "{9path=\"/x\",code")},
      {"S1", Mutate("{path=\"/x\",code", "{__path=\"/x\",code")},
      {"S1", Mutate("{path=\"/x\",code", "{path=/x,code")},
      {"S1", Mutate("demo_temperature -1.5e3", "demo_temperature -1.5e3 ")},
      {"S1", Mutate("demo_temperature -1.5e3", " demo_temperature -1.5e3")},
      {"S1", Mutate("demo_temperature -1.5e3", "demo_temperature-1.5e3")},
      {"S2", Mutate("/a\\\"b", "/a\\tb")},
      {"S2", Mutate("demo_temperature -1.5e3", "demo_temperature{a=\"b -1.5e3")},
      {"S3", Mutate("code=\"400\",}", "code=\"400\",code=\"401\"}")},
      {"S4", Mutate("demo_temperature -1.5e3", "demo_temperature 0x1p3")},
      {"S4", Mutate("demo_temperature -1.5e3", "demo_temperature 1_000")},
      {"S4", Mutate("demo_temperature -1.5e3", "demo_temperature 1.5e")},
      {"S4", Mutate("demo_temperature -1.5e3", "demo_temperature")},
      {"S4", Mutate("demo_temperature -1.5e3", "demo_temperature 1 2 3")},
      {"S4", Mutate("1027 1395066363000", "1027 13950.5")},
      {"F1", Mutate("# TYPE demo_temperature gauge\n", "")},
      {"F1", Mutate("demo_rpc_seconds_sum 1.5", "demo_rpc_seconds_bucket 1.5")},
      {"F2", Mutate("demo_rpc_seconds_count 20\n", "demo_rpc_seconds_count 20\ndemo_temperature 2\n")},
      {"F3", Mutate("demo_ratio{k=\"b\"}", "demo_ratio{k=\"a\"}")},
      {"F3", Mutate("{path=\"/x\",code=\"400\",}", "{code=\"200\",path=\"/a\\\"b\\\\c\\nd\"}")},
      {"F4", Mutate("} 3\n", "} -3\n")},
      {"H1", Mutate("demo_latency_seconds_bucket{op=\"get\",le=\"0.1\"}", "demo_latency_seconds_bucket{op=\"get\"}")},
      {"H1", Mutate("demo_latency_seconds_sum{op=\"get\"}", "demo_latency_seconds_sum{op=\"get\",le=\"1\"}")},
      {"H1", Mutate("le=\"0.1\"", "le=\"fast\"")},
      {"H2", Mutate("le=\"0.1\"} 1", "le=\"0.1\"} 5")},
      {"H2", Mutate("le=\"0.1\"", "le=\"2\"")},
      {"H2", Mutate("le=\"+Inf\"", "le=\"5\"")},
      {"H2", Mutate("le=\"+Inf\"", "le=\"Inf\"")},
      {"H2", Mutate("le=\"1\"} 4", "le=\"1\"} 4.5")},
      {"H3", Mutate("demo_latency_seconds_count{op=\"get\"} 5", "demo_latency_seconds_count{op=\"get\"} 6")},
      {"H3", Mutate("demo_latency_seconds_sum{op=\"get\"} 0.75\n", "")},
      {"quantile", Mutate("quantile=\"0.5\"", "quantile=\"1.5\"")},
  };
  for (const auto& [rule, text] : cases) {
    auto parsed = ParsePrometheusText(text);
    ASSERT_FALSE(parsed.ok()) << "accepted, expected " << rule << ":\n" << text;
    EXPECT_NE(parsed.status().message().find(rule), std::string::npos)
        << "expected " << rule << ", got " << parsed.status().ToString();
  }
}

}  // namespace
}  // namespace kvtier::testing
