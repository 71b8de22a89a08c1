// Conversion between the engine's fp32 compute and the 16-bit KV the paged pool keeps (bf16 or fp16).
// Round to nearest even; NaN stays NaN. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/layout.h"

namespace kvtier::internal {

uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);
float Fp16ToFloat(uint16_t h);

// REQUIRES: dtype is kBF16 or kFP16.
void EncodeKv(DType dtype, const float* src, uint16_t* dst, size_t n);
void DecodeKv(DType dtype, const uint16_t* src, float* dst, size_t n);

}  // namespace kvtier::internal
