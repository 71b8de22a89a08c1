// Transformer: the forward pass of the reference decoder over the paged KV pool.
//
// One call computes several segments at once (a prefill step of one sequence, or one decode token of
// many sequences): linear layers run over all rows in one sgemm, attention runs per segment. Each
// segment's new K and V (or MLA latent, or linear-attention state) go into the pool first and attention
// then reads every key and value, its own included, back from the pool, so KV that was computed here
// and KV that was loaded from a tier are used in exactly the same way. A layer's kind (ModelConfig::kinds)
// picks its attention (attention.cc): full, sliding window (reads only the rows in its window), MLA
// (K and V of each head expanded from the pool's latents) or linear attention (a state kept in the
// pool block of the sequence's latest token; a chunk's first token starts from the state of the chunk
// before, as stored in that chunk).
//
// Tensor parallelism (pool ranks > 1): each KV head's rows live in its rank's part of the pool, each
// rank's query heads read the latent and state from its own copy, and every head's attention is the
// same computation whatever the split; the heads' outputs are gathered in head order before the output
// projection (an all-gather, not a floating-point all-reduce whose sum order would depend on the
// degree), so every TP degree computes bit-identical KV and logits.
//
// Not thread-safe (it owns scratch buffers): callers serialise Forward. It reads the pool blocks named
// by each segment and writes only the rows of that segment's new tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "eval/engine/kv_pool.h"
#include "eval/engine/model_config.h"
#include "eval/engine/weights.h"

namespace kvtier::internal {

struct Segment {
  std::span<const uint32_t> blocks;  // the sequence's block table, covering positions < start + size
  std::span<const uint32_t> tokens;  // the tokens to compute
  uint32_t start = 0;                // position of tokens[0]; KV of [0, start) is already in the pool
  float* logits = nullptr;           // when set: receives `vocab` logits of the segment's last token
};

class Transformer {
 public:
  // `pool` must outlive the transformer and use config.KvLayout().
  Transformer(const ModelConfig& config, std::shared_ptr<const Weights> weights, KvPool* pool);

  void Forward(std::span<const Segment> segments);

  const ModelConfig& config() const { return config_; }

 private:
  // transformer.cc
  void Project(uint32_t layer, std::span<const Segment> segments, size_t rows);
  void Logits(std::span<const Segment> segments, const float* x);
  size_t KWidth(uint32_t layer) const;  // values of one row of k_ at `layer`
  // attention.cc: the attention of one segment at one layer, out = [tokens][q_heads * head_dim].
  void Mix(uint32_t layer, const Segment& seg, const float* q, const float* k, const float* v, float* out);
  void Attention(uint32_t layer, const Segment& seg, const float* q, const float* k, const float* v, float* out);
  void MlaAttention(uint32_t layer, const Segment& seg, const float* q, const float* latent, float* out);
  void LinearAttention(uint32_t layer, const Segment& seg, const float* q, const float* k, const float* v,
                       float* out);
  // Softmax attention of the `group` query heads stacked in qg_ over keys [lo, ctx) in kf_ and vf_
  // (contiguous rows of head_dim); `window` 0: every earlier key. Leaves [group][tokens][head_dim] in og_.
  void Attend(const Segment& seg, size_t group, uint32_t lo, uint32_t window);

  template <typename T>
  static void Grow(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  }

  const ModelConfig config_;
  const std::shared_ptr<const Weights> weights_;
  KvPool* const pool_;
  std::vector<float> inv_freq_, inv_freq_rope_;  // head_dim / 2 and (MLA) rope_dim / 2 entries
  // Scratch, grown on demand.
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_;
  std::vector<float> kf_, vf_, qg_, scores_, og_, lat_;
};

}  // namespace kvtier::internal
