// Runs the `kvtier replay` command as a user would and checks what it writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "eval/replay/replay_test_util.h"

namespace kvtier::internal {
namespace {

// Runs the CLI with `args`, output to `log`; returns its exit status (-1 if it did not exit).
int RunCli(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(KVTIER_CLI_PATH) + " replay " + args + " >" + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ReplayCliTest, WritesJsonAndPlotForASweep) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string json_path = dir.path() + "/out.json";
  const std::string log = dir.path() + "/log.txt";
  const int rc =
      RunCli("--trace " + testing::First500Path() +
                 " --block-tokens 512 --model qwen2.5-0.5b --sweep 100k,1M,10M --json " + json_path,
             log);
  ASSERT_EQ(rc, 0) << ReadFile(log);
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json_path), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << ReadFile(json_path);
  // No capacity given: unlimited, so the Store replay reaches the hash-set figure (553,165 of
  // 6,403,130 tokens by the same python3 count as the whole-trace test).
  EXPECT_DOUBLE_EQ(j["token_hit_ratio"].get<double>(), 553165.0 / 6403130.0);
  EXPECT_DOUBLE_EQ(j["unlimited_token_hit_ratio"].get<double>(), 553165.0 / 6403130.0);
  EXPECT_EQ(j["unique_blocks"].get<uint64_t>(), 11749u);
  EXPECT_EQ(j["wrong_blocks"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["sweep"]["points"].size(), 3u);
  EXPECT_LT(j["sweep"]["points"][0]["token_hit_ratio"].get<double>(),
            j["sweep"]["points"][2]["token_hit_ratio"].get<double>());
  const std::string svg = dir.path() + "/out.svg";
  EXPECT_EQ(j["sweep"]["plot"], svg);
  EXPECT_NE(ReadFile(svg).find("<svg"), std::string::npos);
  EXPECT_NE(ReadFile(log).find("token hit ratio"), std::string::npos);
}

TEST(ReplayCliTest, ComparesAdmissionPoliciesWithAFileTier) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string json_path = dir.path() + "/out.json";
  const std::string log = dir.path() + "/log.txt";
  const int rc =
      RunCli("--trace " + testing::First500Path() + " --model qwen2.5-0.5b --max-requests 20" +
                 " --tiers 'mem://?capacity=100ktokens,file://" + dir.path() +
                 "/cache?capacity=2Mtokens' --json " + json_path,
             log);
  ASSERT_EQ(rc, 0) << ReadFile(log);
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json_path), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["policies"].size(), 2u);
  EXPECT_EQ(j["policies"][0]["admission"], "always");
  EXPECT_EQ(j["policies"][1]["admission"], "second-use");
  EXPECT_EQ(j["tiers"].size(), 2u);
  EXPECT_EQ(j["tiers"][1]["capacity"]["tokens"].get<uint64_t>(), 2000000u / 512 * 512);
  EXPECT_LE(j["policies"][1]["tiers"][1]["bytes_written"].get<uint64_t>(),
            j["policies"][0]["tiers"][1]["bytes_written"].get<uint64_t>());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/cache")) << "run directories are removed";
  // Each tier holds exactly as many blocks as the capacity scaling assumed.
  for (const auto& t : j["tiers"]) {
    EXPECT_EQ(t["scaled_counters"]["measured_bytes_per_block"],
              t["scaled_counters"]["assumed_bytes_per_block"])
        << t.dump();
  }
}

TEST(ReplayCliTest, RefusesBadInputWithAMessage) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string log = dir.path() + "/log.txt";
  EXPECT_NE(RunCli("--trace " + dir.path() + "/missing.jsonl --model llama-3.1-8b", log), 0);
  EXPECT_NE(ReadFile(log).find("missing.jsonl"), std::string::npos) << ReadFile(log);
  EXPECT_NE(RunCli("--trace " + testing::First500Path() + " --model no-such-model", log), 0);
  EXPECT_NE(ReadFile(log).find("llama-3.1-8b"), std::string::npos) << "lists the known presets";
  EXPECT_NE(RunCli("--trace " + testing::First500Path() +
                       " --model llama-3.1-8b --capacity-tokens 1M --tiers mem://",
                   log),
            0);
  EXPECT_NE(
      RunCli("--trace " + testing::First500Path() + " --model llama-3.1-8b --block-tokens 256",
             log),
      0);
  EXPECT_NE(ReadFile(log).find("block"), std::string::npos) << ReadFile(log);
}

}  // namespace
}  // namespace kvtier::internal
