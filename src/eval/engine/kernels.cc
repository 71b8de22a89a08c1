#include "eval/engine/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvtier::internal {

void Linear(const float* in, const float* w, float* out, size_t rows, size_t in_dim, size_t out_dim,
            bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(out_dim),
              static_cast<int>(in_dim), 1.f, in, static_cast<int>(in_dim), w, static_cast<int>(in_dim),
              accumulate ? 1.f : 0.f, out, static_cast<int>(out_dim));
}

void RmsNorm(const float* x, const float* gain, float* out, size_t rows, size_t dim, float eps) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    double ss = 0;
    for (size_t i = 0; i < dim; ++i) ss += double{xr[i]} * xr[i];
    float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (size_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * gain[i];
  }
}

void Rope(float* row, size_t heads, size_t head_dim, uint32_t pos, const float* inv_freq) {
  const size_t half = head_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    double angle = static_cast<double>(pos) * inv_freq[i];
    float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (size_t h = 0; h < heads; ++h) {
      float* x = row + h * head_dim;
      float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

void SwiGlu(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float g = gate[i];
    gate[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

namespace {

// exp(x) for x <= 0 as 2^r * e^y with r = round(x / ln 2), |y| <= ln 2 / 2, e^y by its degree-6 Taylor
// polynomial (relative error below 2e-7). Branch-free so the softmax loop vectorises; every path
// of the engine uses the same function, so recompute and reload stay comparable bit for bit.
inline float ExpNonPositive(float x) {
  x = std::max(x, -87.f);
  const float t = x * 1.44269504088896341f;
  const float r = (t + 12582912.f) - 12582912.f;  // round to nearest integer (|t| < 2^22)
  const float y = x - r * 0.693147180559945309f;
  float p = 1.f / 720;
  p = p * y + 1.f / 120;
  p = p * y + 1.f / 24;
  p = p * y + 1.f / 6;
  p = p * y + 0.5f;
  p = p * y + 1.f;
  p = p * y + 1.f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(r) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace

void MaskedSoftmax(float* row, size_t valid, size_t n) { BandSoftmax(row, 0, valid, n); }

void BandSoftmax(float* row, size_t begin, size_t end, size_t n) {
  float mx = -INFINITY;
  for (size_t i = begin; i < end; ++i) mx = std::max(mx, row[i]);
  for (size_t i = begin; i < end; ++i) row[i] = ExpNonPositive(row[i] - mx);  // vectorised
  float sum = 0;
  for (size_t i = begin; i < end; ++i) sum += row[i];
  float inv = 1.f / sum;
  for (size_t i = begin; i < end; ++i) row[i] *= inv;
  std::fill(row, row + begin, 0.f);
  std::fill(row + end, row + n, 0.f);
}

void SetBlasThreads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

}  // namespace kvtier::internal
