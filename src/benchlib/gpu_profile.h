// GPU profiles and the prefill FLOP model: how long an accelerator would take to recompute the KV of a
// context that a tier could load instead. Every figure here is an ESTIMATE (peak FLOP/s from vendor
// data sheets times an assumed model-FLOPs utilisation); callers must label it as such when printing.
//
// FLOP model for a prefill of `t` tokens on a ModelPreset m (forward pass only):
//   linear    = 2 x m.active_params x t                       (every weight: one multiply-add per token)
//   attention = 4 x m.layers x m.q_heads x head_dim x t^2 / 2  (QK^T and AV, halved for the causal mask)
// Recompute seconds = (linear + attention) / (peak_flops x mfu).
//
// All functions are pure and thread-safe. The profile table is static and lives for the process.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct GpuProfile {
  std::string name;         // lower-case CLI name: "h100", "h200", "a100", "mi308x"
  std::string description;  // e.g. "NVIDIA H100 SXM5"
  double peak_flops = 0;    // dense BF16 tensor FLOP/s (no sparsity)
  double mfu = 0;           // assumed model-FLOPs utilisation of prefill, in (0, 1]
  std::string source;       // where peak_flops comes from, printed next to estimates

  // Sustained prefill FLOP/s: peak_flops x mfu.
  double EffectiveFlops() const { return peak_flops * mfu; }
};

// The built-in presets, in a fixed order.
std::span<const GpuProfile> GpuProfiles();

// Finds a preset by name (case-insensitive) and applies overrides: `mfu` in (0, 1], `peak_tflops` > 0
// (dense BF16 TFLOP/s, e.g. for a GPU without a preset). InvalidArgument naming the known presets for an
// unknown name, or for an override out of range.
Result<GpuProfile> FindGpuProfile(std::string_view name, std::optional<double> mfu = std::nullopt,
                                  std::optional<double> peak_tflops = std::nullopt);

// Prefill FLOPs of `tokens` tokens (model above). 0 for 0 tokens.
double PrefillFlops(const ModelPreset& model, uint64_t tokens);

// Estimated seconds to recompute the KV of `tokens` tokens on `gpu`.
double RecomputeSeconds(const ModelPreset& model, const GpuProfile& gpu, uint64_t tokens);

// Seconds to load the KV of `tokens` tokens at `bytes_per_second`, plus a fixed `latency_s` per load
// (e.g. the first chunk's latency). Infinity when bytes_per_second <= 0.
double LoadSeconds(const Layout& layout, uint64_t tokens, double bytes_per_second, double latency_s = 0);

// The verdict of loading against recomputing for one context length.
struct RecomputeVerdict {
  uint64_t tokens = 0;
  double recompute_s = 0;  // estimate
  double load_s = 0;       // from the measured bandwidth
  double saved_s = 0;      // recompute_s - load_s: TTFT saved per hit (negative: loading loses)
  double speedup = 0;      // recompute_s / load_s
};

RecomputeVerdict CompareLoadToRecompute(const ModelPreset& model, const GpuProfile& gpu,
                                        uint64_t tokens, double bytes_per_second,
                                        double latency_s = 0);

// The shortest context length (tokens) from which loading at `bytes_per_second` (with `latency_s` per
// load) is faster than recomputing on `gpu`. Recompute grows as t^2 and loading as t, so loading always
// wins beyond this length. 0 when loading wins at every length (no fixed latency and the per-token load
// cost is below the per-token linear compute cost).
uint64_t BreakEvenTokens(const ModelPreset& model, const GpuProfile& gpu, double bytes_per_second,
                         double latency_s = 0);

}  // namespace kvtier::internal
