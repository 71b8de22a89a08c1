// Weights of the reference decoder, drawn deterministically from the config's seed.
//
// Every matrix is fp32, row-major [out][in], so a linear layer is one sgemm with the weight transposed.
// The LM head is tied to the embedding (as in the small Qwen models). Values are uniform with the
// variance of a scaled initialisation, so activations keep a sane range through many layers.
// Immutable after construction; safe to share between threads.
#pragma once

#include <memory>
#include <vector>

#include "eval/engine/model_config.h"

namespace kvtier::internal {

// kMla layers: wk is the down projection to the latent [c, k_rope] ([kv_lora_rank + rope_dim][hidden]),
// w_uk and w_uv the per-head up projections of c; wv is empty. Other layers: w_uk and w_uv are empty.
struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> wq;         // [q_heads*head_dim][hidden]
  std::vector<float> wk;         // [kv_heads*head_dim][hidden]
  std::vector<float> wv;         // [kv_heads*head_dim][hidden]
  std::vector<float> w_uk;       // kMla: [q_heads*(head_dim-rope_dim)][kv_lora_rank]
  std::vector<float> w_uv;       // kMla: [q_heads*head_dim][kv_lora_rank]
  std::vector<float> wo;         // [hidden][q_heads*head_dim]
  std::vector<float> mlp_norm;   // [hidden]
  std::vector<float> w_gate;     // [ffn][hidden]
  std::vector<float> w_up;       // [ffn][hidden]
  std::vector<float> w_down;     // [hidden][ffn]
};

struct Weights {
  std::vector<float> embedding;  // [vocab][hidden], also the LM head
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
};

// REQUIRES: config.Validate().ok(). Same config (including seed) -> bit-identical weights.
std::shared_ptr<const Weights> MakeRandomWeights(const ModelConfig& config);

}  // namespace kvtier::internal
