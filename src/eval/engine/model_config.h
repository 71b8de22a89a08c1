// ModelConfig: the shape of the reference engine's llama-style decoder and of its KV.
//
// Presets:
//   tiny          2 layers, hidden 64, 16 tokens per chunk: the oracle tests (milliseconds per prompt)
//   small         29M parameters (4 layers, hidden 512, 8 query / 2 KV heads of 64, SwiGLU 1536, 32,000
//                 tokens, 256 tokens per chunk): an 8,192-token prefill takes seconds on two CPU cores;
//                 the demo and `kvtier bench e2e` (not a trained model: only its cost and its KV are real)
//   qwen2.5-0.5b  the published Qwen2.5-0.5B shape (24 layers, 14 query / 2 KV heads of 64, SwiGLU 4864,
//                 151,936-token vocabulary, tied embeddings); QKV biases are left out
//   tiny-window   4 layers, sliding-window attention (window 20) on layers 0 and 2, full on 1 and 3
//   tiny-mla      2 MLA layers (latent of kv_lora_rank 24 + rope 8 per token)
//   tiny-hybrid   4 layers: linear attention (a per-sequence state) on 0-2, full attention on 3
// The first three keep the classic KV layout (one K/V group over every layer); a config with per-layer
// kinds has the grouped layout of docs/models.md (the oracle tests of the variants, docs/engine.md).
// Weights are never loaded from disk: they are drawn deterministically from `seed`, so two processes
// with the same config compute the same KV and the same logits. Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// What the attention part of one layer is (docs/engine.md, "Attention variants").
enum class LayerKind : uint8_t {
  kFull = 0,    // grouped-query attention over every earlier token
  kWindow = 1,  // the same over the last `window` tokens (the token itself included)
  kMla = 2,     // multi-head latent attention: the pool keeps one latent [c, k_rope] per token
  kLinear = 3,  // linear attention: a per-sequence state per KV head, S = decay S + k^T v
};

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
  std::vector<LayerKind> kinds;  // one per layer; empty: every layer kFull, classic KV layout
  uint32_t window = 0;           // kWindow layers: tokens attended to
  uint32_t kv_lora_rank = 0;     // kMla: width of the compressed latent c
  uint32_t rope_dim = 0;         // kMla: rotary part of each query/key head (head_dim - rope_dim: the rest)

  LayerKind KindOf(uint32_t layer) const { return kinds.empty() ? LayerKind::kFull : kinds[layer]; }
  bool Has(LayerKind kind) const;
  // kMla: values of one latent row (kv_lora_rank + rope_dim).
  uint32_t latent_dim() const { return kv_lora_rank + rope_dim; }
  // kLinear: bytes of one layer's state (kv_heads x head_dim x head_dim fp32).
  uint64_t state_bytes() const { return uint64_t{kv_heads} * head_dim * head_dim * 4; }
  // The KV geometry of one chunk; equals what the Store stores. Classic when `kinds` is empty; grouped
  // otherwise (kv, window, latent and state groups, in that order, those present).
  Layout KvLayout() const;
  // Identity of the weights, used for the Namespace: preset name, shape and seed.
  std::string ModelId() const;
  uint64_t ParameterCount() const;
  // InvalidArgument for a zero field, q_heads not a multiple of kv_heads, an odd head_dim (RoPE pairs),
  // a KV dtype other than bf16/fp16, kinds that do not name every layer, or variant fields that do not
  // match the kinds (a window without window layers, an MLA rope part not even and below head_dim).
  Status Validate() const;

 private:
  std::string VariantId() const;
  Status ValidateVariants() const;
};

std::span<const std::string_view> ModelConfigNames();
// InvalidArgument naming the known presets when `name` is unknown.
Result<ModelConfig> FindModelConfig(std::string_view name);

}  // namespace kvtier::internal
