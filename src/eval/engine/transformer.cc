#include "eval/engine/transformer.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "eval/engine/kernels.h"
#include "eval/engine/kv_convert.h"

namespace kvtier::internal {
namespace {

void Grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, std::shared_ptr<const Weights> weights, KvPool* pool)
    : config_(config), weights_(std::move(weights)), pool_(pool) {
  for (uint32_t i = 0; i < config_.head_dim / 2; ++i) {
    inv_freq_.push_back(static_cast<float>(
        std::pow(static_cast<double>(config_.rope_theta), -2.0 * i / config_.head_dim)));
  }
}

void Transformer::Forward(std::span<const Segment> segments) {
  const ModelConfig& c = config_;
  const size_t h = c.hidden, qd = size_t{c.q_heads} * c.head_dim, kvd = size_t{c.kv_heads} * c.head_dim;
  size_t rows = 0;
  for (const Segment& s : segments) rows += s.tokens.size();
  if (rows == 0) return;
  Grow(x_, rows * h);
  Grow(xn_, rows * h);
  Grow(q_, rows * qd);
  Grow(k_, rows * kvd);
  Grow(v_, rows * kvd);
  Grow(attn_, rows * qd);
  Grow(gate_, rows * c.ffn);
  Grow(up_, rows * c.ffn);

  size_t r = 0;
  for (const Segment& s : segments) {
    for (uint32_t t : s.tokens) {
      std::memcpy(&x_[r * h], &weights_->embedding[size_t{t % c.vocab} * h], h * sizeof(float));
      ++r;
    }
  }
  for (uint32_t l = 0; l < c.layers; ++l) {
    const LayerWeights& w = weights_->layers[l];
    RmsNorm(x_.data(), w.attn_norm.data(), xn_.data(), rows, h, c.rms_eps);
    Linear(xn_.data(), w.wq.data(), q_.data(), rows, h, qd, false);
    Linear(xn_.data(), w.wk.data(), k_.data(), rows, h, kvd, false);
    Linear(xn_.data(), w.wv.data(), v_.data(), rows, h, kvd, false);
    r = 0;
    for (const Segment& s : segments) {
      for (size_t i = 0; i < s.tokens.size(); ++i, ++r) {
        uint32_t pos = s.start + static_cast<uint32_t>(i);
        Rope(&q_[r * qd], c.q_heads, c.head_dim, pos, inv_freq_.data());
        Rope(&k_[r * kvd], c.kv_heads, c.head_dim, pos, inv_freq_.data());
      }
    }
    r = 0;
    for (const Segment& s : segments) {
      WriteKv(l, s, &k_[r * kvd], &v_[r * kvd]);
      Attention(l, s, &q_[r * qd], &attn_[r * qd]);
      r += s.tokens.size();
    }
    Linear(attn_.data(), w.wo.data(), x_.data(), rows, qd, h, true);
    RmsNorm(x_.data(), w.mlp_norm.data(), xn_.data(), rows, h, c.rms_eps);
    Linear(xn_.data(), w.w_gate.data(), gate_.data(), rows, h, c.ffn, false);
    Linear(xn_.data(), w.w_up.data(), up_.data(), rows, h, c.ffn, false);
    SwiGlu(gate_.data(), up_.data(), rows * c.ffn);
    Linear(gate_.data(), w.w_down.data(), x_.data(), rows, c.ffn, h, true);
  }
  Logits(segments, x_.data());
}

void Transformer::WriteKv(uint32_t layer, const Segment& seg, const float* k, const float* v) {
  const uint32_t tpc = config_.tokens_per_chunk;
  const size_t kvd = size_t{config_.kv_heads} * config_.head_dim;
  for (size_t i = 0; i < seg.tokens.size(); ++i) {
    uint32_t pos = seg.start + static_cast<uint32_t>(i);
    uint32_t block = seg.blocks[pos / tpc], slot = pos % tpc;
    EncodeKv(config_.kv_dtype, k + i * kvd, pool_->KRow(layer, block, slot), kvd);
    EncodeKv(config_.kv_dtype, v + i * kvd, pool_->VRow(layer, block, slot), kvd);
  }
}

void Transformer::ReadKv(uint32_t layer, const Segment& seg, uint32_t ctx) {
  const uint32_t tpc = config_.tokens_per_chunk;
  const size_t kvd = size_t{config_.kv_heads} * config_.head_dim;
  Grow(kf_, size_t{ctx} * kvd);
  Grow(vf_, size_t{ctx} * kvd);
  for (uint32_t pos = 0; pos < ctx; pos += tpc) {
    uint32_t block = seg.blocks[pos / tpc];
    size_t n = std::min(tpc, ctx - pos) * kvd;
    DecodeKv(config_.kv_dtype, pool_->KRow(layer, block, 0), &kf_[size_t{pos} * kvd], n);
    DecodeKv(config_.kv_dtype, pool_->VRow(layer, block, 0), &vf_[size_t{pos} * kvd], n);
  }
}

// Grouped-query attention: the query heads that share a KV head are stacked into one matrix so each
// KV head costs one sgemm for the scores and one for the weighted values.
void Transformer::Attention(uint32_t layer, const Segment& seg, const float* q, float* out) {
  const ModelConfig& c = config_;
  const size_t n = seg.tokens.size(), hd = c.head_dim, qd = size_t{c.q_heads} * hd;
  const size_t kvd = size_t{c.kv_heads} * hd, group = c.q_heads / c.kv_heads;
  const uint32_t ctx = seg.start + static_cast<uint32_t>(n);
  ReadKv(layer, seg, ctx);
  Grow(qg_, group * n * hd);
  Grow(scores_, group * n * ctx);
  Grow(og_, group * n * hd);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (uint32_t kvh = 0; kvh < c.kv_heads; ++kvh) {
    for (size_t g = 0; g < group; ++g) {
      size_t qh = kvh * group + g;
      for (size_t i = 0; i < n; ++i) std::memcpy(&qg_[(g * n + i) * hd], q + i * qd + qh * hd, hd * 4);
    }
    const int m = static_cast<int>(group * n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(ctx), static_cast<int>(hd),
                scale, qg_.data(), static_cast<int>(hd), kf_.data() + kvh * hd, static_cast<int>(kvd),
                0.f, scores_.data(), static_cast<int>(ctx));
    for (size_t g = 0; g < group; ++g) {
      for (size_t i = 0; i < n; ++i) {
        MaskedSoftmax(&scores_[(g * n + i) * ctx], seg.start + i + 1, ctx);  // causal
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, static_cast<int>(hd), static_cast<int>(ctx),
                1.f, scores_.data(), static_cast<int>(ctx), vf_.data() + kvh * hd, static_cast<int>(kvd),
                0.f, og_.data(), static_cast<int>(hd));
    for (size_t g = 0; g < group; ++g) {
      size_t qh = kvh * group + g;
      for (size_t i = 0; i < n; ++i) std::memcpy(out + i * qd + qh * hd, &og_[(g * n + i) * hd], hd * 4);
    }
  }
}

// All requested logits come from one sgemm, so a decode batch reads the (large) LM head once.
void Transformer::Logits(std::span<const Segment> segments, const float* x) {
  const size_t h = config_.hidden, vocab = config_.vocab;
  std::vector<const Segment*> wanted;
  size_t r = 0;
  for (const Segment& s : segments) {
    r += s.tokens.size();
    if (s.logits == nullptr || s.tokens.empty()) continue;
    Grow(xn_, (wanted.size() + 1) * h);
    RmsNorm(x + (r - 1) * h, weights_->final_norm.data(), &xn_[wanted.size() * h], 1, h,
            config_.rms_eps);
    wanted.push_back(&s);
  }
  if (wanted.empty()) return;
  Grow(scores_, wanted.size() * vocab);
  Linear(xn_.data(), weights_->embedding.data(), scores_.data(), wanted.size(), h, vocab, false);
  for (size_t i = 0; i < wanted.size(); ++i) {
    std::memcpy(wanted[i]->logits, &scores_[i * vocab], vocab * sizeof(float));
  }
}

}  // namespace kvtier::internal
