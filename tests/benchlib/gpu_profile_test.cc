#include "benchlib/gpu_profile.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier::internal {
namespace {

ModelPreset Llama8b() {
  auto m = FindModelPreset("llama-3.1-8b");
  EXPECT_TRUE(m.ok());
  return *m;
}

TEST(GpuProfileTest, PresetsHaveStatedPeakAndMfu) {
  ASSERT_GE(GpuProfiles().size(), 4u);
  for (const GpuProfile& p : GpuProfiles()) {
    EXPECT_GT(p.peak_flops, 0) << p.name;
    EXPECT_GT(p.mfu, 0) << p.name;
    EXPECT_LE(p.mfu, 1) << p.name;
    EXPECT_FALSE(p.source.empty()) << p.name;
  }
  auto h100 = FindGpuProfile("H100");
  ASSERT_TRUE(h100.ok());
  EXPECT_DOUBLE_EQ(h100->peak_flops, 989.4e12);
  EXPECT_DOUBLE_EQ(h100->mfu, 0.40);
}

TEST(GpuProfileTest, OverridesApplyAndAreChecked) {
  auto p = FindGpuProfile("a100", 0.5, 100.0);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(p->mfu, 0.5);
  EXPECT_DOUBLE_EQ(p->EffectiveFlops(), 50e12);
  EXPECT_EQ(FindGpuProfile("a100", 0.0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FindGpuProfile("a100", 1.5).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FindGpuProfile("a100", std::nullopt, -1.0).status().code(), Code::kInvalidArgument);
  auto unknown = FindGpuProfile("tpu");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("h200"), std::string::npos);
}

// Hand computation for Llama-3.1-8B (32 layers, 32 query heads, head_dim 128, 8.03e9 params),
// a 32768-token prompt:
//   linear    = 2 * 8.03e9 * 32768                  = 5.2625408e14
//   attention = 4 * 32 * 32 * 128 * 32768^2 / 2      = 2^48 = 2.81474976710656e14
TEST(GpuProfileTest, FlopModelMatchesHandComputation) {
  const ModelPreset m = Llama8b();
  EXPECT_DOUBLE_EQ(PrefillFlops(m, 0), 0.0);
  EXPECT_NEAR(PrefillFlops(m, 32768), 5.2625408e14 + 2.81474976710656e14, 1e3);
  // H100 at 40% MFU sustains 395.76e12 FLOP/s: 8.07729e14 / 395.76e12 = 2.04096 s.
  auto h100 = FindGpuProfile("h100");
  ASSERT_TRUE(h100.ok());
  EXPECT_NEAR(RecomputeSeconds(m, *h100, 32768), 2.04096, 1e-4);
}

TEST(GpuProfileTest, LoadSecondsIsBytesOverBandwidth) {
  const ModelPreset m = Llama8b();  // 128 KiB of KV per token
  EXPECT_DOUBLE_EQ(LoadSeconds(m.layout, 32768, 4.0 * (1ull << 30)), 1.0);
  EXPECT_DOUBLE_EQ(LoadSeconds(m.layout, 32768, 4.0 * (1ull << 30), 0.25), 1.25);
  EXPECT_EQ(LoadSeconds(m.layout, 1, 0), std::numeric_limits<double>::infinity());
}

// At 1 GB/s on an H100: per token, loading costs 131072 / 1e9 = 1.31072e-4 s and linear compute
// 2 * 8.03e9 / 395.76e12 = 4.05801e-5 s; attention adds 2 * 32 * 32 * 128 / 395.76e12 = 6.62381e-10 s
// per token^2. Break-even t = (1.31072e-4 - 4.05801e-5) / 6.62381e-10 = 136,616 tokens.
TEST(GpuProfileTest, BreakEvenMatchesHandComputation) {
  const ModelPreset m = Llama8b();
  auto h100 = FindGpuProfile("h100");
  ASSERT_TRUE(h100.ok());
  const uint64_t t = BreakEvenTokens(m, *h100, 1e9);
  EXPECT_NEAR(static_cast<double>(t), 136616.0, 30.0);
  EXPECT_LT(CompareLoadToRecompute(m, *h100, t - 1000, 1e9).saved_s, 0);
  EXPECT_GT(CompareLoadToRecompute(m, *h100, t + 1000, 1e9).saved_s, 0);
}

TEST(GpuProfileTest, FastStorageWinsAtEveryLengthUnlessLatencyAdds) {
  const ModelPreset m = Llama8b();
  auto h100 = FindGpuProfile("h100");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(BreakEvenTokens(m, *h100, 10e9), 0u);  // 1.3e-5 s/token load < 4.1e-5 s/token compute
  const uint64_t with_latency = BreakEvenTokens(m, *h100, 10e9, 0.010);
  EXPECT_GT(with_latency, 0u);
  const auto v = CompareLoadToRecompute(m, *h100, with_latency, 10e9, 0.010);
  EXPECT_NEAR(v.saved_s, 0.0, 1e-4);
  EXPECT_EQ(BreakEvenTokens(m, *h100, 0), std::numeric_limits<uint64_t>::max());
}

}  // namespace
}  // namespace kvtier::internal
