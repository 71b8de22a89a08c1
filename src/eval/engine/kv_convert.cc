#include "eval/engine/kv_convert.h"

#include <cmath>
#include <cstring>

namespace kvtier::internal {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

uint16_t FloatToBf16(float f) {
  uint32_t u = Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t h) { return FromBits(uint32_t{h} << 16); }

uint16_t FloatToFp16(float f) {
  uint32_t u = Bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to infinity
  if (abs < 0x38800000u) {  // subnormal or zero in fp16: let the FPU round to a multiple of 2^-24
    float scaled = FromBits(abs) * 16777216.f;  // exact: multiplies by 2^24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float Fp16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t{h & 0x8000u} << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) / 16777216.f;  // mant x 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (mant << 13));
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

void EncodeKv(DType dtype, const float* src, uint16_t* dst, size_t n) {
  if (dtype == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToFp16(src[i]);
  }
}

void DecodeKv(DType dtype, const uint16_t* src, float* dst, size_t n) {
  if (dtype == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = Fp16ToFloat(src[i]);
  }
}

}  // namespace kvtier::internal
