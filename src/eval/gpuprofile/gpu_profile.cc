#include "eval/gpuprofile/gpu_profile.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "eval/gpuprofile/prefill_fit.h"

namespace kvtier::internal {
namespace {

// Prefill of long prompts is compute-bound; 40% of dense peak is a typical sustained figure for
// well-tuned attention and GEMM kernels. It is an assumption: users override it with --mfu.
constexpr double kDefaultMfu = 0.40;
constexpr double kHopperDenseBf16 = 989.4e12;

GpuProfile Estimate(std::string name, std::string description, double peak, std::string source) {
  GpuProfile p;
  p.name = std::move(name);
  p.description = std::move(description);
  p.peak_flops = peak;
  p.mfu = kDefaultMfu;
  p.source = std::move(source);
  return p;
}

// Timed 2026-12-01 on one NVIDIA H200 (see the method string); the fit fills in the rest.
GpuProfile MeasuredH200() {
  GpuProfile p;
  p.name = "h200";
  p.description = "NVIDIA H200 SXM";
  p.peak_flops = kHopperDenseBf16;
  p.measured = true;
  p.measured_on = "2026-12-01";
  p.method =
      "one NVIDIA H200, bf16, random weights, PyTorch SDPA flash attention, one sequence, no batching; "
      "about 540-590 TFLOP/s achieved";
  p.source = "measured " + p.measured_on + " on " + p.method;
  p.points = {{"llama-3.1-8b", 8192, 0.242},   {"llama-3.1-8b", 32768, 1.378},
              {"llama-3.1-8b", 131072, 11.56}, {"qwen2.5-32b", 32768, 4.81},
              {"llama-3.1-70b", 8192, 2.07},   {"llama-3.1-70b", 32768, 10.06}};
  p.fits = FitPrefill(p.points, ModelPresets());
  // The shared fit's linear rate, as a fraction of peak: what the achieved MFU was.
  const PrefillFit& shared = p.fits.back();
  p.mfu = shared.linear_s > 0 ? 1.0 / (shared.linear_s * p.peak_flops) : 0;
  return p;
}

const std::vector<GpuProfile>& Table() {
  static const std::vector<GpuProfile> table = {
      MeasuredH200(),
      Estimate("h100", "NVIDIA H100 SXM5", kHopperDenseBf16,
               "NVIDIA H100 data sheet: 1,979 TFLOP/s BF16 with sparsity, half of it dense"),
      Estimate("h200-est", "NVIDIA H200 SXM", kHopperDenseBf16,
               "NVIDIA H200 data sheet: 1,979 TFLOP/s BF16 with sparsity, half of it dense"),
      Estimate("a100", "NVIDIA A100 SXM 80GB", 312e12, "NVIDIA A100 data sheet: 312 TFLOP/s dense BF16"),
      // No public vendor data sheet: MI300X's 1,307.4 TFLOP/s dense BF16 (304 CUs) scaled to the
      // reported 80 CUs at the same clock. An assumption; override with --peak-tflops.
      Estimate("mi308x", "AMD Instinct MI308X", 1307.4e12 * 80.0 / 304.0,
               "derived: MI300X 1,307.4 TFLOP/s dense BF16 x 80/304 CUs (no public data sheet)"),
  };
  return table;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Recompute seconds of t tokens as a2 t^2 + a1 t, where a1 includes minus the per-token load cost.
struct Coefficients {
  double a2;  // attention seconds per token^2
  double a1;  // linear compute seconds per token minus load seconds per token
};

Coefficients CoefficientsOf(const ModelPreset& m, const GpuProfile& gpu, double bytes_per_second) {
  const PrefillFit fit = FitFor(m, gpu);
  const double a2 = fit.attention_s * AttentionFlops(m, 0, 1);
  const double a1 = fit.linear_s * LinearFlops(m, 1) -
                    static_cast<double>(m.layout.BytesPerToken()) / bytes_per_second;
  return {a2, a1};
}

}  // namespace

std::string GpuProfile::Label() const {
  char buf[160];
  if (measured) {
    return name + ": MEASURED " + measured_on + " on " + method +
           "; FLOP-model fit (linear + attention) between the measured points";
  }
  std::snprintf(buf, sizeof(buf), " at %.0f TFLOP/s dense bf16 x MFU %.2f", peak_flops / 1e12, mfu);
  return name + ": ESTIMATE, " + description + buf + " (" + source + ")";
}

std::span<const GpuProfile> GpuProfiles() { return Table(); }

Result<GpuProfile> FindGpuProfile(std::string_view name, std::optional<double> mfu,
                                  std::optional<double> peak_tflops) {
  const std::string want = Lower(name);
  std::string known;
  for (const GpuProfile& p : Table()) {
    if (p.name != want) {
      known += (known.empty() ? "" : ", ") + p.name;
      continue;
    }
    GpuProfile out = p;
    if (p.measured && (mfu || peak_tflops)) {
      return Status::InvalidArgument("profile " + p.name +
                                     " is measured: --mfu and --peak-tflops apply to estimated "
                                     "profiles only (e.g. h200-est)");
    }
    if (mfu) {
      if (!(*mfu > 0 && *mfu <= 1)) {
        return Status::InvalidArgument("--mfu must be in (0, 1], got " + std::to_string(*mfu));
      }
      out.mfu = *mfu;
    }
    if (peak_tflops) {
      if (!(*peak_tflops > 0)) {
        return Status::InvalidArgument("--peak-tflops must be positive");
      }
      out.peak_flops = *peak_tflops * 1e12;
      out.source = "user override";
    }
    return out;
  }
  return Status::InvalidArgument("unknown GPU profile '" + std::string(name) + "' (known: " + known +
                                 ")");
}

std::string GpuProfileNames(bool kinds) {
  std::string out;
  for (const auto& g : GpuProfiles()) {
    out += (out.empty() ? "" : ", ") + g.name;
    if (kinds) out += " (" + std::string(g.Kind()) + ")";
  }
  return out;
}

double LinearFlops(const ModelPreset& m, uint64_t new_tokens) {
  return 2.0 * static_cast<double>(m.active_params) * static_cast<double>(new_tokens);
}

namespace {

// Layers x the dim a query head attends over, summed over a grouped layout's attention layers: K head
// dim for kv and window layers (a window's cap on the cached tokens is not modelled: an upper bound),
// the latent dim for MLA layers (absorbed form); state layers have no term quadratic in the context.
double GroupedAttentionWidth(const Layout& l) {
  double w = 0;
  for (const LayerGroup& g : l.groups) {
    if (g.head_split()) w += static_cast<double>(g.layers.size()) * g.k_head_dim;
    if (g.kind == GroupKind::kLatent) w += static_cast<double>(g.layers.size()) * g.latent_dim;
  }
  return w;
}

}  // namespace

double AttentionFlops(const ModelPreset& m, uint64_t cached_tokens, uint64_t new_tokens) {
  const double n = static_cast<double>(new_tokens);
  const double c = static_cast<double>(cached_tokens);
  if (!m.layout.classic()) return 2.0 * m.q_heads * GroupedAttentionWidth(m.layout) * n * (2.0 * c + n);
  return 2.0 * m.layout.layers * m.q_heads * static_cast<double>(m.layout.head_dim) * n * (2.0 * c + n);
}

double PrefillFlops(const ModelPreset& m, uint64_t tokens) {
  return LinearFlops(m, tokens) + AttentionFlops(m, 0, tokens);
}

PrefillFit FitFor(const ModelPreset& m, const GpuProfile& gpu) {
  if (gpu.measured && !gpu.fits.empty()) {
    for (const PrefillFit& f : gpu.fits) {
      if (!f.model.empty() && f.model == m.name) return f;
    }
    return gpu.fits.back();
  }
  const double s = gpu.EffectiveFlops() > 0 ? 1.0 / gpu.EffectiveFlops() : 0;
  return PrefillFit{std::string(m.name), s, s, 0};
}

double PrefillSeconds(const ModelPreset& m, const GpuProfile& gpu, uint64_t cached_tokens,
                      uint64_t new_tokens) {
  const PrefillFit f = FitFor(m, gpu);
  return f.linear_s * LinearFlops(m, new_tokens) + f.attention_s * AttentionFlops(m, cached_tokens, new_tokens);
}

double RecomputeSeconds(const ModelPreset& m, const GpuProfile& gpu, uint64_t tokens) {
  return PrefillSeconds(m, gpu, 0, tokens);
}

double LoadSeconds(const Layout& layout, uint64_t tokens, double bytes_per_second, double latency_s) {
  if (!(bytes_per_second > 0)) return std::numeric_limits<double>::infinity();
  return latency_s +
         static_cast<double>(layout.BytesPerToken()) * static_cast<double>(tokens) / bytes_per_second;
}

double BreakEvenBandwidth(const ModelPreset& m, const GpuProfile& gpu, uint64_t tokens) {
  const double s = RecomputeSeconds(m, gpu, tokens);
  if (!(s > 0)) return std::numeric_limits<double>::infinity();
  return static_cast<double>(m.layout.BytesPerToken()) * static_cast<double>(tokens) / s;
}

RecomputeVerdict CompareLoadToRecompute(const ModelPreset& m, const GpuProfile& gpu, uint64_t tokens,
                                        double bytes_per_second, double latency_s) {
  RecomputeVerdict v;
  v.tokens = tokens;
  v.recompute_s = RecomputeSeconds(m, gpu, tokens);
  v.load_s = LoadSeconds(m.layout, tokens, bytes_per_second, latency_s);
  v.saved_s = v.recompute_s - v.load_s;
  v.speedup = v.load_s > 0 ? v.recompute_s / v.load_s : 0;
  return v;
}

uint64_t BreakEvenTokens(const ModelPreset& m, const GpuProfile& gpu, double bytes_per_second,
                         double latency_s) {
  if (!(bytes_per_second > 0)) return std::numeric_limits<uint64_t>::max();
  // Loading wins where a2 t^2 + a1 t - latency > 0; the positive root is the break-even length.
  const auto [a2, a1] = CoefficientsOf(m, gpu, bytes_per_second);
  const double t0 = std::max(latency_s, 0.0);
  if (t0 == 0 && a1 >= 0) return 0;
  if (!(a2 > 0)) return std::numeric_limits<uint64_t>::max();  // a fit with no attention term
  const double root = (-a1 + std::sqrt(a1 * a1 + 4.0 * a2 * t0)) / (2.0 * a2);
  return static_cast<uint64_t>(std::ceil(root));
}

}  // namespace kvtier::internal
