#include "eval/gpuprofile/prefill_fit.h"

#include <gtest/gtest.h>

#include <cmath>

#include "eval/gpuprofile/gpu_profile.h"

namespace kvtier::internal {
namespace {

ModelPreset Preset(const char* name) {
  auto m = FindModelPreset(name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

GpuProfile H200() {
  auto p = FindGpuProfile("h200");
  EXPECT_TRUE(p.ok());
  return *p;
}

// Every measured point of the h200 profile comes back from the fit within 3%.
TEST(PrefillFitTest, ReproducesTheMeasuredH200Points) {
  const GpuProfile g = H200();
  ASSERT_EQ(g.points.size(), 6u);
  for (const MeasuredPoint& p : g.points) {
    const double fitted = RecomputeSeconds(Preset(p.model.c_str()), g, p.tokens);
    EXPECT_NEAR(fitted / p.seconds, 1.0, 0.03) << p.model << " " << p.tokens << " tokens: fit " << fitted
                                               << " s, measured " << p.seconds << " s";
  }
}

// The fitted coefficients imply an achieved rate in the measured range (about 540-590 TFLOP/s), not
// something a typo in the table would give.
TEST(PrefillFitTest, FitIsPhysicallyPlausible) {
  const GpuProfile g = H200();
  for (const PrefillFit& f : g.fits) {
    EXPECT_GE(f.linear_s, 0) << f.model;
    EXPECT_GE(f.attention_s, 0) << f.model;
    EXPECT_GT(f.linear_s + f.attention_s, 0) << f.model;
  }
  EXPECT_GT(g.EffectiveFlops(), 400e12);
  EXPECT_LT(g.EffectiveFlops(), 800e12);
  EXPECT_EQ(FitFor(Preset("llama-3.1-8b"), g).points, 3u);
  EXPECT_EQ(FitFor(Preset("qwen2.5-32b"), g).points, 1u);
  EXPECT_EQ(FitFor(Preset("qwen2.5-0.5b"), g).points, 0u);
}

// Seconds grow with tokens for every model, also for the new tokens of a returning turn as the cached
// prefix grows.
TEST(PrefillFitTest, FittedSecondsAreMonotonic) {
  const GpuProfile g = H200();
  for (const ModelPreset& m : ModelPresets()) {
    double prev = 0;
    for (uint64_t t = 256; t <= (1u << 18); t += 256 * 7) {
      const double s = RecomputeSeconds(m, g, t);
      EXPECT_GT(s, prev) << m.name << " at " << t;
      prev = s;
    }
    double prev_turn = 0;
    for (uint64_t c = 0; c <= (1u << 17); c += 4096) {
      const double s = PrefillSeconds(m, g, c, 128);
      EXPECT_GT(s, prev_turn) << m.name << " after " << c;
      prev_turn = s;
    }
  }
}

// Two exact points of a known model are solved exactly; one point is passed through; points of an
// unknown model are ignored.
TEST(PrefillFitTest, SolvesKnownCoefficients) {
  const ModelPreset m = Preset("llama-3.1-8b");
  const double a = 1.0 / 500e12, b = 1.0 / 300e12;
  auto seconds = [&](uint64_t t) { return a * LinearFlops(m, t) + b * AttentionFlops(m, 0, t); };
  const MeasuredPoint pts[] = {{"llama-3.1-8b", 4096, seconds(4096)},
                               {"llama-3.1-8b", 65536, seconds(65536)},
                               {"qwen2.5-32b", 8192, 2.0},
                               {"no-such-model", 8192, 1.0}};
  const auto fits = FitPrefill(pts, ModelPresets());
  ASSERT_EQ(fits.size(), ModelPresets().size() + 1);
  ASSERT_EQ(fits[0].model, "llama-3.1-8b");
  EXPECT_NEAR(fits[0].linear_s / a, 1.0, 1e-6);
  EXPECT_NEAR(fits[0].attention_s / b, 1.0, 1e-6);
  const ModelPreset q = Preset("qwen2.5-32b");
  for (const PrefillFit& f : fits) {
    if (f.model != "qwen2.5-32b") continue;
    EXPECT_EQ(f.points, 1u);
    EXPECT_NEAR(f.linear_s * LinearFlops(q, 8192) + f.attention_s * AttentionFlops(q, 0, 8192), 2.0, 1e-9);
  }
  EXPECT_TRUE(FitPrefill({}, ModelPresets()).empty());
}

// Points that a negative coefficient would fit best (seconds falling faster than linear) still give
// non-negative coefficients.
TEST(PrefillFitTest, NeverFitsANegativeTerm) {
  const ModelPreset m = Preset("llama-3.1-8b");
  const MeasuredPoint pts[] = {{"llama-3.1-8b", 8192, 1.0}, {"llama-3.1-8b", 131072, 2.0}};
  const auto fits = FitPrefill(pts, ModelPresets());
  ASSERT_FALSE(fits.empty());
  EXPECT_GE(fits[0].linear_s, 0);
  EXPECT_GE(fits[0].attention_s, 0);
  EXPECT_GT(fits[0].linear_s + fits[0].attention_s, 0);
  (void)m;
}

}  // namespace
}  // namespace kvtier::internal
