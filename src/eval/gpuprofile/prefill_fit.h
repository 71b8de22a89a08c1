// Fitting the prefill FLOP model (gpuprofile/gpu_profile.h) to measured prefill timings.
//
// Per model: seconds = a x linear_flops + b x attention_flops with a, b >= 0, chosen by least squares of
// the RELATIVE error over the model's points (a 0.24 s point counts as much as an 11 s one). A model
// with two or more points gets its own fit; a model with one point gets the shared fit (all points of
// every model, each in its own model's FLOPs) scaled to pass through its point; a model with none gets
// the shared fit. Non-negative a and b keep seconds monotonic in tokens.
//
// Pure functions; thread-safe.
#pragma once

#include <span>
#include <vector>

#include "eval/gpuprofile/gpu_profile.h"
#include "kvtier/layout.h"

namespace kvtier::internal {

// Fits every preset of `models` to `points` (points naming no preset in `models` are ignored), in the
// order of `models`, followed by the shared fit (model ""). Empty when `points` is empty.
std::vector<PrefillFit> FitPrefill(std::span<const MeasuredPoint> points,
                                   std::span<const ModelPreset> models);

}  // namespace kvtier::internal
