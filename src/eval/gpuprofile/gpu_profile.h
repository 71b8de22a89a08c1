// GPU profiles and the prefill FLOP model: how long an accelerator takes to compute the KV of a
// context that a tier could load instead. Two kinds of profile, and callers must print which one:
//
//   estimate  peak FLOP/s from a vendor data sheet times an assumed model-FLOPs utilisation (MFU);
//   measured  prefill seconds timed on a real GPU for some (model, tokens) points; between and beyond
//             them the FLOP model below is fitted to the points (gpuprofile/prefill_fit.h).
//
// FLOP model of a prefill of `n` new tokens after `c` cached ones on a ModelPreset m (forward pass):
//   linear    = 2 x m.active_params x n                          (every weight: one multiply-add/token)
//   attention = 2 x m.layers x m.q_heads x head_dim x n x (2c + n) (QK^T and AV over the causal prefix)
// With c = 0 the attention term is 4 x L x H x d x n^2 / 2. Seconds = a x linear + b x attention; an
// estimate has a = b = 1 / (peak_flops x mfu), a measured profile the fitted a and b of the model.
//
// All functions are pure and thread-safe. The profile table is static and lives for the process.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// One timed prefill of a measured profile: `tokens` tokens, nothing cached, took `seconds`.
struct MeasuredPoint {
  std::string model;  // a ModelPreset name, e.g. "llama-3.1-8b"
  uint64_t tokens = 0;
  double seconds = 0;
};

// Seconds per FLOP of the two terms of the FLOP model, for one model on one profile.
struct PrefillFit {
  std::string model;        // preset name; empty for the profile-wide (shared) fit
  double linear_s = 0;      // seconds per linear FLOP (>= 0)
  double attention_s = 0;   // seconds per attention FLOP (>= 0)
  uint32_t points = 0;      // measured points of this model the fit used (0: the shared fit)
};

struct GpuProfile {
  std::string name;         // lower-case CLI name: "h100", "h200", "h200-est", "a100", "mi308x"
  std::string description;  // e.g. "NVIDIA H100 SXM5"
  double peak_flops = 0;    // dense BF16 tensor FLOP/s (no sparsity)
  double mfu = 0;           // estimate: assumed MFU; measured: the shared fit's achieved fraction of peak
  std::string source;       // where the figures come from, printed next to them

  bool measured = false;
  std::string measured_on;  // measured only: the date, "2026-12-01"
  std::string method;       // measured only: how, e.g. "bf16, random weights, PyTorch SDPA flash ..."
  std::vector<MeasuredPoint> points;  // measured only
  std::vector<PrefillFit> fits;       // measured only: one per model preset, then the shared fit

  // Sustained prefill FLOP/s: peak_flops x mfu.
  double EffectiveFlops() const { return peak_flops * mfu; }
  // "measured" or "estimate".
  std::string_view Kind() const { return measured ? "measured" : "estimate"; }
  // One line for every output that uses the profile, e.g.
  // "h200: MEASURED 2026-12-01 on one NVIDIA H200 (...); FLOP-model fit between points" or
  // "h100: ESTIMATE, NVIDIA H100 SXM5 at 989 TFLOP/s dense bf16 x MFU 0.40 (...)".
  std::string Label() const;
};

// The built-in presets, in a fixed order.
std::span<const GpuProfile> GpuProfiles();
// Their names for a CLI's help, comma separated; with each one's kind ("h200 (measured)") when `kinds`.
std::string GpuProfileNames(bool kinds = false);

// Finds a preset by name (case-insensitive) and applies overrides: `mfu` in (0, 1], `peak_tflops` > 0
// (dense BF16 TFLOP/s, e.g. for a GPU without a preset). InvalidArgument naming the known presets for an
// unknown name, for an override out of range, or for an override of a measured profile (its figures
// come from the timings, not from a peak and an MFU).
Result<GpuProfile> FindGpuProfile(std::string_view name, std::optional<double> mfu = std::nullopt,
                                  std::optional<double> peak_tflops = std::nullopt);

// The two terms of the FLOP model (above) of `new_tokens` after `cached_tokens`.
double LinearFlops(const ModelPreset& model, uint64_t new_tokens);
double AttentionFlops(const ModelPreset& model, uint64_t cached_tokens, uint64_t new_tokens);

// Prefill FLOPs of `tokens` tokens with nothing cached. 0 for 0 tokens.
double PrefillFlops(const ModelPreset& model, uint64_t tokens);

// The fit `gpu` uses for `model`: the model's own for a measured profile that has one (matched by
// preset name), else the shared fit; for an estimate, 1 / EffectiveFlops() for both terms.
PrefillFit FitFor(const ModelPreset& model, const GpuProfile& gpu);

// Seconds of a prefill of `new_tokens` whose first `cached_tokens` tokens of context are already in
// GPU memory (loaded from a tier): the work of a returning turn. 0 for 0 new tokens.
double PrefillSeconds(const ModelPreset& model, const GpuProfile& gpu, uint64_t cached_tokens,
                      uint64_t new_tokens);

// Seconds to recompute the KV of `tokens` tokens on `gpu` (PrefillSeconds with nothing cached).
double RecomputeSeconds(const ModelPreset& model, const GpuProfile& gpu, uint64_t tokens);

// Seconds to load the KV of `tokens` tokens at `bytes_per_second`, plus a fixed `latency_s` per load
// (e.g. the first chunk's latency). Infinity when bytes_per_second <= 0.
double LoadSeconds(const Layout& layout, uint64_t tokens, double bytes_per_second, double latency_s = 0);

// Bytes per second at which loading the KV of `tokens` tokens takes as long as recomputing it.
double BreakEvenBandwidth(const ModelPreset& model, const GpuProfile& gpu, uint64_t tokens);

// The verdict of loading against recomputing for one context length.
struct RecomputeVerdict {
  uint64_t tokens = 0;
  double recompute_s = 0;  // from the profile (estimate or measured fit)
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
