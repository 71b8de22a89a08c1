// ModelConfig: the shape of the reference engine's llama-style decoder and of its KV.
//
// Presets:
//   tiny          2 layers, hidden 64, 16 tokens per chunk: the oracle tests (milliseconds per prompt)
//   small         29M parameters (4 layers, hidden 512, 8 query / 2 KV heads of 64, SwiGLU 1536, 32,000
//                 tokens, 256 tokens per chunk): an 8,192-token prefill takes seconds on two CPU cores;
//                 the demo and `kvtier bench e2e` (not a trained model: only its cost and its KV are real)
//   qwen2.5-0.5b  the published Qwen2.5-0.5B shape (24 layers, 14 query / 2 KV heads of 64, SwiGLU 4864,
//                 151,936-token vocabulary, tied embeddings); QKV biases are left out
// Weights are never loaded from disk: they are drawn deterministically from `seed`, so two processes
// with the same config compute the same KV and the same logits. Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct ModelConfig {
  std::string name;          // preset name, e.g. "tiny"
  uint32_t vocab = 0;
  uint32_t hidden = 0;
  uint32_t layers = 0;
  uint32_t q_heads = 0;
  uint32_t kv_heads = 0;     // grouped-query attention: q_heads is a multiple of kv_heads
  uint32_t head_dim = 0;
  uint32_t ffn = 0;          // SwiGLU inner size
  float rope_theta = 10000.f;
  float rms_eps = 1e-6f;
  DType kv_dtype = DType::kBF16;  // how the paged pool (and every stored chunk) keeps K and V
  uint32_t tokens_per_chunk = kDefaultTokensPerChunk;
  uint64_t seed = 1;

  // The KV geometry of one chunk; equals what the Store stores.
  Layout KvLayout() const;
  // Identity of the weights, used for the Namespace: preset name, shape and seed.
  std::string ModelId() const;
  uint64_t ParameterCount() const;
  // InvalidArgument for a zero field, q_heads not a multiple of kv_heads, an odd head_dim (RoPE pairs)
  // or a KV dtype other than bf16/fp16.
  Status Validate() const;
};

std::span<const std::string_view> ModelConfigNames();
// InvalidArgument naming the known presets when `name` is unknown.
Result<ModelConfig> FindModelConfig(std::string_view name);

}  // namespace kvtier::internal
