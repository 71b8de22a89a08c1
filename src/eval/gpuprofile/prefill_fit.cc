#include "eval/gpuprofile/prefill_fit.h"

#include <limits>
#include <tuple>
#include <utility>

namespace kvtier::internal {
namespace {

// One point in units the fit solves for: x = linear FLOPs / seconds, y = attention FLOPs / seconds, so
// that a x + b y = 1 is an exact fit and (a x + b y - 1) is the relative error.
struct Scaled {
  double x, y;
};

double Residual(std::span<const Scaled> s, double a, double b) {
  double r = 0;
  for (const Scaled& p : s) r += (a * p.x + b * p.y - 1) * (a * p.x + b * p.y - 1);
  return r;
}

// Least squares of a x + b y = 1 with a, b >= 0. The unconstrained 2x2 solution when it is feasible,
// else the better of the two one-term fits (the optimum then lies on an axis).
std::pair<double, double> SolveNonNegative(std::span<const Scaled> s) {
  double xx = 0, xy = 0, yy = 0, x1 = 0, y1 = 0;
  for (const Scaled& p : s) {
    xx += p.x * p.x;
    xy += p.x * p.y;
    yy += p.y * p.y;
    x1 += p.x;
    y1 += p.y;
  }
  const double det = xx * yy - xy * xy;
  if (s.size() >= 2 && det > 1e-12 * xx * yy) {
    const double a = (x1 * yy - y1 * xy) / det;
    const double b = (xx * y1 - xy * x1) / det;
    if (a >= 0 && b >= 0) return {a, b};
  }
  const std::pair<double, double> only_a{xx > 0 ? x1 / xx : 0, 0};
  const std::pair<double, double> only_b{0, yy > 0 ? y1 / yy : 0};
  return Residual(s, only_a.first, only_a.second) <= Residual(s, only_b.first, only_b.second) ? only_a
                                                                                             : only_b;
}

Scaled ScaledPoint(const ModelPreset& m, const MeasuredPoint& p) {
  return {LinearFlops(m, p.tokens) / p.seconds, AttentionFlops(m, 0, p.tokens) / p.seconds};
}

const ModelPreset* PresetNamed(std::span<const ModelPreset> models, const std::string& name) {
  for (const ModelPreset& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

}  // namespace

std::vector<PrefillFit> FitPrefill(std::span<const MeasuredPoint> points,
                                   std::span<const ModelPreset> models) {
  std::vector<Scaled> all;
  for (const MeasuredPoint& p : points) {
    const ModelPreset* m = PresetNamed(models, p.model);
    if (m != nullptr && p.tokens > 0 && p.seconds > 0) all.push_back(ScaledPoint(*m, p));
  }
  if (all.empty()) return {};
  const auto [shared_a, shared_b] = SolveNonNegative(all);
  std::vector<PrefillFit> out;
  for (const ModelPreset& m : models) {
    std::vector<Scaled> own;
    for (const MeasuredPoint& p : points) {
      if (p.model == m.name && p.tokens > 0 && p.seconds > 0) own.push_back(ScaledPoint(m, p));
    }
    PrefillFit fit{std::string(m.name), shared_a, shared_b, static_cast<uint32_t>(own.size())};
    if (own.size() >= 2) {
      std::tie(fit.linear_s, fit.attention_s) = SolveNonNegative(own);
    } else if (own.size() == 1) {
      // Through the one point, with the shared fit's balance of the two terms.
      const double predicted = shared_a * own[0].x + shared_b * own[0].y;
      const double k = predicted > 0 ? 1.0 / predicted : 1.0;
      fit.linear_s *= k;
      fit.attention_s *= k;
    }
    out.push_back(fit);
  }
  out.push_back(PrefillFit{"", shared_a, shared_b, 0});
  return out;
}

}  // namespace kvtier::internal
