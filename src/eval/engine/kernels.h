// The fp32 building blocks of the reference decoder. Linear layers go through OpenBLAS sgemm; the rest
// are plain loops whose result does not depend on how rows are batched, so a prompt computed in one pass
// and the same prompt computed after a loaded prefix see the same per-row arithmetic.
// Pure functions over caller-owned buffers; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::internal {

// out[rows][out_dim] = in[rows][in_dim] x w[out_dim][in_dim]^T (+ out when accumulate).
void Linear(const float* in, const float* w, float* out, size_t rows, size_t in_dim, size_t out_dim,
            bool accumulate);

// out[r] = x[r] / rms(x[r]) * gain, for each of `rows` rows of `dim`.
void RmsNorm(const float* x, const float* gain, float* out, size_t rows, size_t dim, float eps);

// Rotates the two halves of each head of one row (rotate-half RoPE) for absolute position `pos`.
// `inv_freq` has head_dim/2 entries.
void Rope(float* row, size_t heads, size_t head_dim, uint32_t pos, const float* inv_freq);

// gate[i] = silu(gate[i]) * up[i].
void SwiGlu(float* gate, const float* up, size_t n);

// In-place softmax of the first `valid` entries of a row; entries [valid, n) become 0.
void MaskedSoftmax(float* row, size_t valid, size_t n);
// In-place softmax of entries [begin, end) of a row; the others become 0. REQUIRES: begin < end <= n.
void BandSoftmax(float* row, size_t begin, size_t end, size_t n);

// Sets the OpenBLAS thread count (the engine's "device" parallelism); n <= 0 leaves it alone.
void SetBlasThreads(int n);

}  // namespace kvtier::internal
