// Transformer: the forward pass of the reference decoder over the paged KV pool.
//
// One call computes several segments at once (a prefill step of one sequence, or one decode token of
// many sequences): linear layers run over all rows in one sgemm, attention runs per segment. Each
// segment's new K and V are rounded into the pool first and attention then reads every key and value,
// its own included, back from the pool, so KV that was computed here and KV that was loaded from a tier
// are used in exactly the same way.
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
  void Attention(uint32_t layer, const Segment& seg, const float* q, float* out);
  void WriteKv(uint32_t layer, const Segment& seg, const float* k, const float* v);
  void ReadKv(uint32_t layer, const Segment& seg, uint32_t ctx);
  void Logits(std::span<const Segment> segments, const float* x);

  const ModelConfig config_;
  const std::shared_ptr<const Weights> weights_;
  KvPool* const pool_;
  std::vector<float> inv_freq_;
  // Scratch, grown on demand.
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_;
  std::vector<float> kf_, vf_, qg_, scores_, og_;
};

}  // namespace kvtier::internal
