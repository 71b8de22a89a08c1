#include "benchlib/gpu_profile.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

namespace kvtier::internal {
namespace {

// Prefill of long prompts is compute-bound; 40% of dense peak is a typical sustained figure for
// well-tuned attention and GEMM kernels. It is an assumption: users override it with --mfu.
constexpr double kDefaultMfu = 0.40;

const std::vector<GpuProfile>& Table() {
  static const std::vector<GpuProfile> table = {
      {"h100", "NVIDIA H100 SXM5", 989.4e12, kDefaultMfu,
       "NVIDIA H100 data sheet: 1,979 TFLOP/s BF16 with sparsity, half of it dense"},
      {"h200", "NVIDIA H200 SXM", 989.4e12, kDefaultMfu,
       "NVIDIA H200 data sheet: 1,979 TFLOP/s BF16 with sparsity, half of it dense"},
      {"a100", "NVIDIA A100 SXM 80GB", 312e12, kDefaultMfu,
       "NVIDIA A100 data sheet: 312 TFLOP/s dense BF16"},
      // No public vendor data sheet: MI300X's 1,307.4 TFLOP/s dense BF16 (304 CUs) scaled to the
      // reported 80 CUs at the same clock. An assumption; override with --peak-tflops.
      {"mi308x", "AMD Instinct MI308X", 1307.4e12 * 80.0 / 304.0, kDefaultMfu,
       "derived: MI300X 1,307.4 TFLOP/s dense BF16 x 80/304 CUs (no public data sheet)"},
  };
  return table;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Recompute seconds as a2 * t^2 + a1 * t, where a1 includes minus the per-token load cost.
struct Coefficients {
  double a2;  // attention seconds per token^2
  double a1;  // linear compute seconds per token minus load seconds per token
};

Coefficients CoefficientsOf(const ModelPreset& m, const GpuProfile& gpu, double bytes_per_second) {
  const double f = gpu.EffectiveFlops();
  const double a2 = 2.0 * m.layout.layers * m.q_heads * m.layout.head_dim / f;
  const double a1 = 2.0 * static_cast<double>(m.active_params) / f -
                    static_cast<double>(m.layout.BytesPerToken()) / bytes_per_second;
  return {a2, a1};
}

}  // namespace

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

double PrefillFlops(const ModelPreset& m, uint64_t tokens) {
  const double t = static_cast<double>(tokens);
  const double linear = 2.0 * static_cast<double>(m.active_params) * t;
  const double attention =
      4.0 * m.layout.layers * m.q_heads * static_cast<double>(m.layout.head_dim) * t * t / 2.0;
  return linear + attention;
}

double RecomputeSeconds(const ModelPreset& m, const GpuProfile& gpu, uint64_t tokens) {
  return PrefillFlops(m, tokens) / gpu.EffectiveFlops();
}

double LoadSeconds(const Layout& layout, uint64_t tokens, double bytes_per_second, double latency_s) {
  if (!(bytes_per_second > 0)) return std::numeric_limits<double>::infinity();
  return latency_s +
         static_cast<double>(layout.BytesPerToken()) * static_cast<double>(tokens) / bytes_per_second;
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
  const double root = (-a1 + std::sqrt(a1 * a1 + 4.0 * a2 * t0)) / (2.0 * a2);
  return static_cast<uint64_t>(std::ceil(root));
}

}  // namespace kvtier::internal
