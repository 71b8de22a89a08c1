#include "eval/engine/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "eval/engine/kernels.h"
#include "eval/engine/kv_convert.h"

namespace kvtier::internal {
namespace {

std::vector<float> InverseFrequencies(float theta, uint32_t dim) {
  std::vector<float> out;
  for (uint32_t i = 0; i < dim / 2; ++i) {
    out.push_back(static_cast<float>(std::pow(static_cast<double>(theta), -2.0 * i / dim)));
  }
  return out;
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, std::shared_ptr<const Weights> weights, KvPool* pool)
    : config_(config),
      weights_(std::move(weights)),
      pool_(pool),
      inv_freq_(InverseFrequencies(config.rope_theta, config.head_dim)),
      inv_freq_rope_(InverseFrequencies(config.rope_theta, config.rope_dim)) {}

size_t Transformer::KWidth(uint32_t layer) const {
  return config_.KindOf(layer) == LayerKind::kMla ? config_.latent_dim()
                                                   : size_t{config_.kv_heads} * config_.head_dim;
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
  Grow(k_, rows * std::max<size_t>(kvd, c.latent_dim()));
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
    Project(l, segments, rows);
    r = 0;
    for (const Segment& s : segments) {
      Mix(l, s, &q_[r * qd], &k_[r * KWidth(l)], &v_[r * kvd], &attn_[r * qd]);
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

// q, k and v of every row at `layer` (RoPE applied by position): full and window layers rotate every
// query and key head; MLA layers the rope part of each query head and of the latent (k_ holds the
// latents [c, k_rope], v_ is unused); linear-attention layers use no positions.
void Transformer::Project(uint32_t layer, std::span<const Segment> segments, size_t rows) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[layer];
  const LayerKind kind = c.KindOf(layer);
  const size_t h = c.hidden, hd = c.head_dim, qd = size_t{c.q_heads} * hd, kw = KWidth(layer);
  Linear(xn_.data(), w.wq.data(), q_.data(), rows, h, qd, false);
  Linear(xn_.data(), w.wk.data(), k_.data(), rows, h, kw, false);
  if (kind != LayerKind::kMla) Linear(xn_.data(), w.wv.data(), v_.data(), rows, h, kw, false);
  if (kind == LayerKind::kLinear) return;
  size_t r = 0;
  for (const Segment& s : segments) {
    for (size_t i = 0; i < s.tokens.size(); ++i, ++r) {
      const uint32_t pos = s.start + static_cast<uint32_t>(i);
      if (kind != LayerKind::kMla) {
        Rope(&q_[r * qd], c.q_heads, hd, pos, inv_freq_.data());
        Rope(&k_[r * kw], c.kv_heads, hd, pos, inv_freq_.data());
        continue;
      }
      const size_t nope = hd - c.rope_dim;
      for (uint32_t qh = 0; qh < c.q_heads; ++qh) {
        Rope(&q_[r * qd + qh * hd + nope], 1, c.rope_dim, pos, inv_freq_rope_.data());
      }
      Rope(&k_[r * kw + c.kv_lora_rank], 1, c.rope_dim, pos, inv_freq_rope_.data());
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
