// Layout: the KV-cache geometry of one model, which fixes the byte size of a chunk.
//
// A chunk holds the keys and values of `tokens_per_chunk` consecutive tokens for every layer:
// bytes = 2 (K and V) x layers x kv_heads x head_dim x dtype size x tokens_per_chunk.
// Layouts are plain values; every function here is thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

enum class DType : uint8_t { kFP32 = 0, kFP16 = 1, kBF16 = 2, kFP8 = 3 };

size_t DTypeBytes(DType dtype);
std::string_view DTypeName(DType dtype);  // "fp32", "fp16", "bf16", "fp8"
Result<DType> ParseDType(std::string_view name);

inline constexpr uint32_t kDefaultTokensPerChunk = 256;

struct Layout {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kBF16;
  uint32_t tokens_per_chunk = kDefaultTokensPerChunk;

  uint64_t BytesPerToken() const;
  uint64_t BytesPerChunk() const;
  // Stable across processes, hosts and versions of kvtier: an xxHash3 of a fixed encoding of the fields.
  uint64_t Fingerprint() const;
  // InvalidArgument when a field is zero or the chunk would exceed 4 GiB.
  Status Validate() const;
  std::string ToString() const;  // e.g. "32x8x128 bf16, 256 tokens/chunk"

  bool operator==(const Layout&) const = default;
};

// A published model shape: its KV layout and the figures needed to estimate prefill compute.
struct ModelPreset {
  std::string_view name;      // lower case CLI name, e.g. "llama-3.1-8b"
  std::string_view model_id;  // e.g. "meta-llama/Llama-3.1-8B"
  Layout layout;              // bf16, 256 tokens per chunk
  uint32_t hidden_size = 0;
  uint32_t q_heads = 0;
  uint64_t active_params = 0;  // parameters touched per token (MoE: active experts only)
};

std::span<const ModelPreset> ModelPresets();
// InvalidArgument naming the known presets when `name` is unknown.
Result<ModelPreset> FindModelPreset(std::string_view name);

}  // namespace kvtier
