// The attention variants of the reference decoder (docs/engine.md, "Attention variants"): full and
// sliding-window grouped-query attention, MLA and linear attention, each reading what it uses back from
// the paged pool.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "eval/engine/kernels.h"
#include "eval/engine/kv_convert.h"
#include "eval/engine/transformer.h"

namespace kvtier::internal {
namespace {

// Linear attention: S = kLinearDecay x S + k^T v per token, so the state of a long sequence stays bounded.
constexpr float kLinearDecay = 0.9f;

// Decodes the rows [lo, ctx) of a sequence (block table `blocks`) into dst, [ctx - lo][width];
// rows_of(block) gives a block's rows. Reads no other row.
template <typename RowsOf>
void DecodeRowRange(DType dtype, std::span<const uint32_t> blocks, uint32_t tpc, uint32_t lo, uint32_t ctx,
                    size_t width, RowsOf rows_of, float* dst) {
  for (uint32_t pos = lo; pos < ctx;) {
    const uint32_t slot = pos % tpc, n = std::min(tpc - slot, ctx - pos);
    const PoolRows rows = rows_of(blocks[pos / tpc]);
    float* out = dst + size_t{pos - lo} * width;
    if (rows.stride == width) {
      DecodeKv(dtype, rows.Row(slot), out, size_t{n} * width);
    } else {
      for (uint32_t i = 0; i < n; ++i) DecodeKv(dtype, rows.Row(slot + i), out + i * width, width);
    }
    pos += n;
  }
}

// Rounds `n` rows of `width` values (`src_stride` apart in src) into the pool at positions start...
template <typename RowsOf>
void EncodeRowRange(DType dtype, std::span<const uint32_t> blocks, uint32_t tpc, uint32_t start, size_t n,
                    const float* src, size_t src_stride, size_t width, RowsOf rows_of) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t pos = start + static_cast<uint32_t>(i);
    EncodeKv(dtype, src + i * src_stride, rows_of(blocks[pos / tpc]).Row(pos % tpc), width);
  }
}

// out = x / |x| (dim values).
void UnitVector(const float* x, float* out, size_t dim) {
  double ss = 0;
  for (size_t i = 0; i < dim; ++i) ss += double{x[i]} * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss + 1e-6));
  for (size_t i = 0; i < dim; ++i) out[i] = x[i] * inv;
}

}  // namespace

void Transformer::Mix(uint32_t layer, const Segment& seg, const float* q, const float* k, const float* v,
                      float* out) {
  switch (config_.KindOf(layer)) {
    case LayerKind::kMla:
      return MlaAttention(layer, seg, q, k, out);
    case LayerKind::kLinear:
      return LinearAttention(layer, seg, q, k, v, out);
    case LayerKind::kFull:
    case LayerKind::kWindow:
      return Attention(layer, seg, q, k, v, out);
  }
}

// Grouped-query attention, one KV head at a time: the query heads that share it are stacked into one
// matrix, so each KV head costs one sgemm for the scores and one for the weighted values. A window
// layer decodes no row before the first query's window: those rows may never have been loaded.
void Transformer::Attention(uint32_t layer, const Segment& seg, const float* q, const float* k, const float* v,
                            float* out) {
  const ModelConfig& c = config_;
  const size_t n = seg.tokens.size(), hd = c.head_dim, qd = size_t{c.q_heads} * hd;
  const size_t kvd = size_t{c.kv_heads} * hd, group = c.q_heads / c.kv_heads;
  const uint32_t tpc = c.tokens_per_chunk, ctx = seg.start + static_cast<uint32_t>(n);
  const uint32_t window = c.KindOf(layer) == LayerKind::kWindow ? c.window : 0;
  const uint32_t lo = window != 0 && seg.start + 1 > window ? seg.start + 1 - window : 0;
  Grow(kf_, size_t{ctx - lo} * hd);
  Grow(vf_, size_t{ctx - lo} * hd);
  Grow(qg_, group * n * hd);
  for (uint32_t kvh = 0; kvh < c.kv_heads; ++kvh) {
    auto k_rows = [&](uint32_t b) { return pool_->K(layer, kvh, b); };
    auto v_rows = [&](uint32_t b) { return pool_->V(layer, kvh, b); };
    EncodeRowRange(c.kv_dtype, seg.blocks, tpc, seg.start, n, k + kvh * hd, kvd, hd, k_rows);
    EncodeRowRange(c.kv_dtype, seg.blocks, tpc, seg.start, n, v + kvh * hd, kvd, hd, v_rows);
    DecodeRowRange(c.kv_dtype, seg.blocks, tpc, lo, ctx, hd, k_rows, kf_.data());
    DecodeRowRange(c.kv_dtype, seg.blocks, tpc, lo, ctx, hd, v_rows, vf_.data());
    for (size_t g = 0; g < group; ++g) {
      const size_t qh = kvh * group + g;
      for (size_t i = 0; i < n; ++i) std::memcpy(&qg_[(g * n + i) * hd], q + i * qd + qh * hd, hd * 4);
    }
    Attend(seg, group, lo, window);
    for (size_t g = 0; g < group; ++g) {
      const size_t qh = kvh * group + g;
      for (size_t i = 0; i < n; ++i) std::memcpy(out + i * qd + qh * hd, &og_[(g * n + i) * hd], hd * 4);
    }
  }
}

void Transformer::Attend(const Segment& seg, size_t group, uint32_t lo, uint32_t window) {
  const size_t n = seg.tokens.size(), hd = config_.head_dim;
  const uint32_t ctx = seg.start + static_cast<uint32_t>(n);
  const size_t keys = ctx - lo;
  Grow(scores_, group * n * keys);
  Grow(og_, group * n * hd);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int m = static_cast<int>(group * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(keys), static_cast<int>(hd), scale,
              qg_.data(), static_cast<int>(hd), kf_.data(), static_cast<int>(hd), 0.f, scores_.data(),
              static_cast<int>(keys));
  for (size_t g = 0; g < group; ++g) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t pos = seg.start + static_cast<uint32_t>(i);  // causal, and within the window
      const uint32_t first = std::max(lo, window != 0 && pos + 1 > window ? pos + 1 - window : 0u);
      BandSoftmax(&scores_[(g * n + i) * keys], first - lo, pos + 1 - lo, keys);
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, static_cast<int>(hd), static_cast<int>(keys), 1.f,
              scores_.data(), static_cast<int>(keys), vf_.data(), static_cast<int>(hd), 0.f, og_.data(),
              static_cast<int>(hd));
}

// MLA: the pool keeps one latent row [c, k_rope] per token (not per head); query head h attends over
// K_h = [c W_uk_h^T, k_rope] and V_h = c W_uv_h^T, expanded from the latents it reads back. The latent is
// not split across tensor-parallel ranks: every rank writes and reads its own copy, for its query heads.
void Transformer::MlaAttention(uint32_t layer, const Segment& seg, const float* q, const float* latent, float* out) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[layer];
  const size_t n = seg.tokens.size(), hd = c.head_dim, qd = size_t{c.q_heads} * hd, width = c.latent_dim();
  const size_t rank = c.kv_lora_rank, nope = hd - c.rope_dim;
  const uint32_t tpc = c.tokens_per_chunk, ctx = seg.start + static_cast<uint32_t>(n);
  const uint32_t per_rank = c.q_heads / pool_->ranks();
  Grow(lat_, size_t{ctx} * width);
  Grow(kf_, size_t{ctx} * hd);
  Grow(vf_, size_t{ctx} * hd);
  Grow(qg_, n * hd);
  for (uint32_t r = 0; r < pool_->ranks(); ++r) {
    auto rows = [&](uint32_t b) { return pool_->Latent(layer, b, r); };
    EncodeRowRange(c.kv_dtype, seg.blocks, tpc, seg.start, n, latent, width, width, rows);
    DecodeRowRange(c.kv_dtype, seg.blocks, tpc, 0, ctx, width, rows, lat_.data());
    for (uint32_t qh = r * per_rank; qh < (r + 1) * per_rank; ++qh) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(ctx), static_cast<int>(nope),
                  static_cast<int>(rank), 1.f, lat_.data(), static_cast<int>(width), w.w_uk.data() + qh * nope * rank,
                  static_cast<int>(rank), 0.f, kf_.data(), static_cast<int>(hd));
      for (uint32_t j = 0; j < ctx; ++j) std::memcpy(&kf_[j * hd + nope], &lat_[j * width + rank], c.rope_dim * 4);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(ctx), static_cast<int>(hd),
                  static_cast<int>(rank), 1.f, lat_.data(), static_cast<int>(width), w.w_uv.data() + qh * hd * rank,
                  static_cast<int>(rank), 0.f, vf_.data(), static_cast<int>(hd));
      for (size_t i = 0; i < n; ++i) std::memcpy(&qg_[i * hd], q + i * qd + qh * hd, hd * 4);
      Attend(seg, 1, 0, 0);
      for (size_t i = 0; i < n; ++i) std::memcpy(out + i * qd + qh * hd, &og_[i * hd], hd * 4);
    }
  }
}

// Linear attention with a decaying state per KV head, S = decay S + k^T v (k and q unit vectors), and
// output q S. The state lives in the pool: in the block of the sequence's latest token, so the block
// of a complete chunk holds the state at the chunk's end (what a save stores and a load brings back),
// and a chunk's first token starts from the state stored in the chunk before. It is not split across
// ranks: every rank updates its own whole copy and answers for its query heads from it.
void Transformer::LinearAttention(uint32_t layer, const Segment& seg, const float* q, const float* k,
                                  const float* v, float* out) {
  const ModelConfig& c = config_;
  const size_t n = seg.tokens.size(), hd = c.head_dim, qd = size_t{c.q_heads} * hd, kvd = size_t{c.kv_heads} * hd;
  const uint32_t tpc = c.tokens_per_chunk, group = c.q_heads / c.kv_heads;
  const uint32_t per_rank = c.kv_heads / pool_->ranks();
  Grow(kf_, hd);
  Grow(qg_, hd);
  for (uint32_t r = 0; r < pool_->ranks(); ++r) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t pos = seg.start + static_cast<uint32_t>(i);
      float* state = pool_->State(layer, seg.blocks[pos / tpc], r);
      if (pos % tpc == 0 && pos == 0) std::fill(state, state + kvd * hd, 0.f);
      if (pos % tpc == 0 && pos > 0) {
        std::memcpy(state, pool_->State(layer, seg.blocks[pos / tpc - 1], r), c.state_bytes());
      }
      for (uint32_t h = 0; h < c.kv_heads; ++h) {
        float* s = state + size_t{h} * hd * hd;
        const float* vh = v + i * kvd + h * hd;
        UnitVector(k + i * kvd + h * hd, kf_.data(), hd);
        for (size_t a = 0; a < hd; ++a) {
          for (size_t b = 0; b < hd; ++b) s[a * hd + b] = kLinearDecay * s[a * hd + b] + kf_[a] * vh[b];
        }
      }
      for (uint32_t qh = r * per_rank * group; qh < (r + 1) * per_rank * group; ++qh) {
        const float* s = state + size_t{qh / group} * hd * hd;
        float* o = out + i * qd + qh * hd;
        UnitVector(q + i * qd + qh * hd, qg_.data(), hd);
        std::fill(o, o + hd, 0.f);
        for (size_t a = 0; a < hd; ++a) {
          for (size_t b = 0; b < hd; ++b) o[b] += qg_[a] * s[a * hd + b];
        }
      }
    }
  }
}

}  // namespace kvtier::internal
