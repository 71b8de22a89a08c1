// Numbers from outside: URL options, durations and the numeric flags of every `kvtier` subcommand are
// range-checked without overflow; relative and `~` paths in URLs are refused naming the absolute form.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "hostile/cli_runner.h"
#include "kvtier/tier.h"
#include "support/temp_dir.h"

namespace kvtier {
namespace {

using hostile::CliResult;
using hostile::Describe;
using hostile::RunKvtier;

TEST(HostileUrlNumbers, SizesThatDoNotFitAreRefusedNeverWrapped) {
  const char* bad[] = {
      "99999999999999999999",      // 10^20 bytes
      "18446744073709551616",      // 2^64
      "1e30GiB",                   // exponents are not sizes
      "1e30",
      "18446744073709551615TiB",   // overflows only after the unit
      "16777216TiB",               // exactly 2^64
      "17179869184GiB",            // 2^64 in GiB
      "-1", "-0", "+5", " 5",
      "1.5.5", ".", ".GiB", "",
      "nan", "NaN", "inf", "infinity", "0x10",
      "1.5EiB",                    // unknown unit
      "100000000000000000000000000000000000000000000000000000000000000000000000000000000TiB",
  };
  for (const char* text : bad) {
    auto url = TierUrl::Parse(std::string("mem://?capacity=") + text);
    if (!url.ok()) continue;  // rejected earlier is fine too
    auto size = url->GetSize("capacity", 7);
    EXPECT_FALSE(size.ok()) << text << " gave " << (size.ok() ? *size : 0);
    if (!size.ok()) {
      EXPECT_EQ(size.status().code(), Code::kInvalidArgument) << text;
    }
  }
}

TEST(HostileUrlNumbers, SizesAreExactUpToTheLastByte) {
  EXPECT_EQ(*ParseSize("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*ParseSize("16777215TiB"), 16777215ull << 40);
  EXPECT_EQ(*ParseSize("9007199254740993"), 9007199254740993ull);  // 2^53 + 1: not a double
  EXPECT_EQ(*ParseSize("1.5"), 2u);                                // half a byte rounds up
  EXPECT_EQ(*ParseSize("0.5KiB"), 512u);
  EXPECT_EQ(*ParseSize("1.5TiB"), 3ull << 39);
  EXPECT_EQ(*ParseSize("1.0000000000000000000000001GiB"), 1ull << 30);
  EXPECT_EQ(*ParseSize("18446744073.709551615GB"), UINT64_MAX);
  EXPECT_FALSE(ParseSize("18446744073.709551616GB").ok());
}

TEST(HostileUrlNumbers, WholeNumbersAreCheckedAndBounded) {
  auto u = TierUrl::Parse(
      "x://?max=18446744073709551615&over=18446744073709551616&huge=99999999999999999999"
      "&neg=-1&plus=+1&space=%201&hex=0x10&frac=1.5&exp=1e3&empty=&ten=10");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(*u->GetUint("max", 0), UINT64_MAX);
  for (const char* name : {"over", "huge", "neg", "plus", "space", "hex", "frac", "exp", "empty"}) {
    auto v = u->GetUint(name, 0);
    EXPECT_FALSE(v.ok()) << name;
  }
  EXPECT_EQ(*u->GetUint("ten", 0, 10), 10u);
  auto over = u->GetUint("ten", 0, 9);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("limit"), std::string::npos) << over.status().ToString();
  auto s = TierUrl::Parse("x://?cap=2GiB");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s->GetSize("cap", 0, 2ull << 30), 2ull << 30);
  EXPECT_FALSE(s->GetSize("cap", 0, (2ull << 30) - 1).ok());
}

TEST(HostileUrlPaths, RelativeAndHomePathsAreRefusedNamingTheAbsoluteForm) {
  const std::string cwd = std::filesystem::current_path().string();
  auto rel = TierUrl::Parse("file://relative/dir");
  ASSERT_FALSE(rel.ok());
  EXPECT_EQ(rel.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(rel.status().message(), "file:// paths must be absolute: relative/dir (did you mean file://" +
                                        cwd + "/relative/dir?)");
  const char* home = std::getenv("HOME");
  ASSERT_NE(home, nullptr);
  auto tilde = TierUrl::Parse("file://~/kv?capacity=1GiB");
  ASSERT_FALSE(tilde.ok());
  EXPECT_NE(tilde.status().message().find(std::string("file://") + home + "/kv?"), std::string::npos)
      << tilde.status().ToString();
  for (const char* url : {"fs://~", "fs://host/export/pool", "file://.", "file://..", "file://./x",
                          "file://%2E%2E/x", "mem://relative"}) {
    auto r = TierUrl::Parse(url);
    EXPECT_FALSE(r.ok()) << url;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("must be absolute"), std::string::npos) << url;
    }
  }
  for (const char* url : {"file:///abs/dir", "fs:///mnt/pool?capacity=1GiB", "mem://", "mem:///",
                          "mem://?capacity=1GiB", "file:///~/kv"}) {
    EXPECT_TRUE(TierUrl::Parse(url).ok()) << url;
  }
}

TEST(HostileDurations, HugeDurationsAreRefusedWithinAHundredYears) {
  EXPECT_EQ(ParseDuration("600")->count(), 600);
  EXPECT_EQ(ParseDuration("10m")->count(), 600);
  EXPECT_EQ(ParseDuration("2h")->count(), 7200);
  EXPECT_EQ(ParseDuration("36525d")->count(), 36525ll * 86400);  // 100 years: the limit
  EXPECT_EQ(ParseDuration("3155760000s")->count(), 3155760000ll);
  for (const char* bad : {"36526d", "999999999d", "3155760001", "99999999999999999999999s",
                          "18446744073709551615d", "-1", "-1d", "1.5h", "", "d", "10x", "1e9",
                          "nan", " 5", "5 s"}) {
    auto d = ParseDuration(bad);
    EXPECT_FALSE(d.ok()) << bad;
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << bad;
    }
  }
  // Any accepted duration fits in nanoseconds: the limit leaves room.
  const auto max = *ParseDuration("36525d");
  EXPECT_LT(max.count(), INT64_MAX / 1'000'000'000);
}

TEST(HostileDurations, GcRefusesAHugeGraceBeforeTouchingThePool) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string pool = dir.path() + "/pool";
  const CliResult r = RunKvtier({"gc", "--target", "fs://" + pool, "--max-size", "1GiB", "--grace",
                                 "999999999d"},
                                dir.path() + "/log");
  ASSERT_TRUE(r.exited) << Describe(r);
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_TRUE(r.OneLine()) << r.output;
  EXPECT_NE(r.output.find("duration too long"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(pool)) << "nothing was created";
}

// Every numeric flag refuses negative, overflowing, octal/hex, NaN/inf text with a non-zero exit
// and a message naming the value, before the command does any work.
TEST(HostileCliNumbers, EveryNumericFlagIsRangeChecked) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string trace = dir.path() + "/missing.jsonl";  // never reached
  const std::string target = "file://" + dir.path() + "/bench";
  struct Case {
    std::vector<std::string> args;
    std::string value;
  };
  std::vector<Case> cases;
  auto replay = [&](const std::string& flag, const std::string& v) {
    cases.push_back({{"replay", "--trace", trace, "--model", "llama-3.1-8b", flag, v}, v});
  };
  auto datapath = [&](const std::string& flag, const std::string& v) {
    cases.push_back({{"bench", "datapath", "--target", target, flag, v}, v});
  };
  auto e2e = [&](const std::string& flag, const std::string& v) {
    cases.push_back({{"bench", "e2e", "--modes", "recompute", flag, v}, v});
  };
  auto save = [&](const std::string& flag, const std::string& v) {
    cases.push_back({{"bench", "save", "--target", target, "--no-fio", flag, v}, v});
  };
  for (const char* v : {"-1", "0", "99999999999999999999", "0x10", "1e3", "4294967296"}) {
    replay("--block-tokens", v);
  }
  for (const char* v : {"-1", "1", "3.5", "4294967296", "0x10"}) replay("--replay-bytes-per-token", v);
  for (const char* v : {"-1", "99999999999999999999", "1e3"}) replay("--max-requests", v);
  for (const char* v : {"nan", "inf", "-0.5", "1.5", "0x1p-1"}) replay("--reference-ratio", v);
  for (const char* v : {"-1", "0", "99999999999", "010"}) datapath("--chunk-tokens", v);
  for (const char* v : {"-1", "0", "18446744073709551615", "1e6"}) datapath("--context-tokens", v);
  for (const char* v : {"0", "101", "-1", "4294967297"}) datapath("--repeat", v);
  for (const char* v : {"nan", "inf", "-1", "2"}) datapath("--mfu", v);
  for (const char* v : {"nan", "inf", "-1", "0", "1e300"}) datapath("--peak-tflops", v);
  for (const char* v : {"-1", "2048TiB", "1125899906842625", "18446744073709551615"}) datapath("--total", v);
  for (const char* v : {"-1", "1,2TiB", "1e3"}) datapath("--inflight", v);
  for (const char* v : {"fast", "0GB/s", "-1GB/s", "nanGB/s", "2", "2000PB/s"}) save("--rate", v);
  for (const char* v : {"nan", "inf", "-1", "0", "3601"}) save("--seconds", v);
  for (const char* v : {"-1", "0", "4097", "0x10"}) save("--gpus", v);
  for (const char* v : {"-1", "21"}) save("--bisect", v);
  for (const char* v : {"-1", "2048TiB", "lots"}) save("--queue-bytes", v);
  for (const char* v : {"-1", "0", "16777217"}) save("--context-tokens", v);
  for (const char* v : {"0", "1025"}) save("--fio-depth", v);
  for (const char* v : {"-1", "0", "99999999999", "16777217"}) e2e("--context", v);
  for (const char* v : {"-1", "0", "4294967296"}) e2e("--turn", v);
  for (const char* v : {"-1", "0", "1048577"}) e2e("--output", v);
  for (const char* v : {"-1", "0", "65537"}) e2e("--min-sessions", v);
  for (const char* v : {"-1", "0", "99999999999"}) e2e("--prefill-step", v);
  for (const char* v : {"-1", "4097", "1e3"}) e2e("--threads", v);
  for (const char* v : {"-1", "18446744073709551616", "0x10"}) e2e("--seed", v);
  for (const char* v : {"-1", "0", "1025", "4294967297", "1,x"}) e2e("--concurrency", v);
  const std::string log = dir.path() + "/log";
  for (const Case& c : cases) {
    std::string line;
    for (const auto& a : c.args) line += a + " ";
    const CliResult r = RunKvtier(c.args, log);
    ASSERT_TRUE(r.exited) << line << Describe(r);
    EXPECT_NE(r.exit_code, 0) << line << Describe(r);
    const std::string& flag = c.args[c.args.size() - 2];
    EXPECT_TRUE(r.output.find(c.value) != std::string::npos || r.output.find(flag) != std::string::npos)
        << line << Describe(r);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/bench")) << "no bench started";
}

TEST(HostileCliNumbers, UrlsOnTheCommandLineAreCheckedToo) {
  testing::TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string log = dir.path() + "/log";
  const CliResult rel = RunKvtier({"bench", "datapath", "--target", "file://relative/dir", "--no-fio"}, log);
  ASSERT_TRUE(rel.exited) << Describe(rel);
  EXPECT_NE(rel.exit_code, 0);
  EXPECT_TRUE(rel.OneLine()) << rel.output;
  EXPECT_NE(rel.output.find("must be absolute"), std::string::npos) << rel.output;
  EXPECT_FALSE(std::filesystem::exists("relative")) << "nothing created in the working directory";
  const CliResult huge = RunKvtier(
      {"bench", "datapath", "--target", "mem://?capacity=99999999999999999999TiB", "--total", "1MiB",
       "--no-fio"},
      log);
  ASSERT_TRUE(huge.exited) << Describe(huge);
  EXPECT_NE(huge.exit_code, 0);
  EXPECT_NE(huge.output.find("too large"), std::string::npos) << huge.output;
}

}  // namespace
}  // namespace kvtier
