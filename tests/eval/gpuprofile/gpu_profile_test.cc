#include "eval/gpuprofile/gpu_profile.h"

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
  ASSERT_GE(GpuProfiles().size(), 5u);
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
  // A measured profile's figures come from its timings: no MFU or peak to override.
  EXPECT_EQ(FindGpuProfile("h200", 0.5).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FindGpuProfile("h200", std::nullopt, 100.0).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(FindGpuProfile("h200-est", 0.5).ok());
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

TEST(GpuProfileTest, MeasuredAndEstimatedProfilesAreLabelled) {
  for (const GpuProfile& p : GpuProfiles()) {
    const std::string label = p.Label();
    if (p.name == "h200") {
      EXPECT_TRUE(p.measured);
      EXPECT_EQ(p.Kind(), "measured");
      EXPECT_EQ(p.measured_on, "2026-12-01");
      EXPECT_EQ(p.points.size(), 6u);
      EXPECT_NE(label.find("MEASURED 2026-12-01"), std::string::npos) << label;
      EXPECT_NE(label.find("one NVIDIA H200"), std::string::npos) << label;
      EXPECT_EQ(label.find("ESTIMATE"), std::string::npos) << label;
    } else {
      EXPECT_FALSE(p.measured) << p.name;
      EXPECT_EQ(p.Kind(), "estimate");
      EXPECT_TRUE(p.points.empty()) << p.name;
      EXPECT_NE(label.find("ESTIMATE"), std::string::npos) << label;
      EXPECT_EQ(label.find("MEASURED"), std::string::npos) << label;
    }
  }
  auto est = FindGpuProfile("h200-est");
  ASSERT_TRUE(est.ok());
  EXPECT_FALSE(est->measured);
}

// A returning turn: 128 new tokens after 8,192 cached ones attend to 8,320 positions each, so the
// attention term is 2 x L x H x d x 128 x (2 x 8192 + 128), and the linear term is 2 x P x 128.
TEST(GpuProfileTest, PrefillAfterCachedContextCountsAttentionToThePrefix) {
  const ModelPreset m = Llama8b();
  EXPECT_DOUBLE_EQ(AttentionFlops(m, 0, 32768) + LinearFlops(m, 32768), PrefillFlops(m, 32768));
  EXPECT_DOUBLE_EQ(AttentionFlops(m, 8192, 128), 2.0 * 32 * 32 * 128 * 128 * (2.0 * 8192 + 128));
  auto h100 = FindGpuProfile("h100");
  ASSERT_TRUE(h100.ok());
  const double want = (LinearFlops(m, 128) + AttentionFlops(m, 8192, 128)) / h100->EffectiveFlops();
  EXPECT_NEAR(PrefillSeconds(m, *h100, 8192, 128), want, want * 1e-12);
  EXPECT_EQ(PrefillSeconds(m, *h100, 8192, 0), 0.0);
  // The new tokens cost more after a longer prefix, and much less than the whole prompt.
  EXPECT_GT(PrefillSeconds(m, *h100, 32768, 128), PrefillSeconds(m, *h100, 8192, 128));
  EXPECT_LT(PrefillSeconds(m, *h100, 8192, 128), 0.05 * RecomputeSeconds(m, *h100, 8192 + 128));
}

TEST(GpuProfileTest, BreakEvenBandwidthIsKvBytesOverRecomputeSeconds) {
  const ModelPreset m = Llama8b();
  auto h200 = FindGpuProfile("h200");
  ASSERT_TRUE(h200.ok());
  const double bw = BreakEvenBandwidth(m, *h200, 32768);
  // 4 GiB of KV in about 1.378 s: about 3.1 GB/s (the figure of issue 11).
  EXPECT_NEAR(bw / 1e9, 4294967296.0 / 1.378 / 1e9, 0.1);
  EXPECT_NEAR(CompareLoadToRecompute(m, *h200, 32768, bw).saved_s, 0.0, 1e-9);
}

}  // namespace
}  // namespace kvtier::internal
