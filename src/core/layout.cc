#include "kvtier/layout.h"

#include "core/xxh3.h"

#include <array>
#include <string>

namespace kvtier {

size_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kFP32: return 4;
    case DType::kFP16: return 2;
    case DType::kBF16: return 2;
    case DType::kFP8: return 1;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFP32: return "fp32";
    case DType::kFP16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kFP8: return "fp8";
  }
  return "unknown";
}

Result<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kFP32, DType::kFP16, DType::kBF16, DType::kFP8}) {
    if (name == DTypeName(d)) return d;
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (expected fp32, fp16, bf16 or fp8)");
}

uint64_t Layout::BytesPerToken() const {
  return 2ull * layers * kv_heads * head_dim * DTypeBytes(dtype);
}

uint64_t Layout::BytesPerChunk() const { return BytesPerToken() * tokens_per_chunk; }

uint64_t Layout::Fingerprint() const {
  // Fixed little-endian encoding; never reorder: the fingerprint is stored in chunk headers.
  std::array<uint8_t, 21> buf{};
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) buf[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put32(0, 1);  // encoding version
  put32(4, layers);
  put32(8, kv_heads);
  put32(12, head_dim);
  buf[16] = static_cast<uint8_t>(dtype);
  put32(17, tokens_per_chunk);
  return XXH3_64bits(buf.data(), buf.size());
}

Status Layout::Validate() const {
  if (layers == 0 || kv_heads == 0 || head_dim == 0 || tokens_per_chunk == 0) {
    return Status::InvalidArgument("layout fields must be positive: " + ToString());
  }
  if (DTypeBytes(dtype) == 0) return Status::InvalidArgument("layout has an unknown dtype");
  // Every product is checked: a geometry whose size wraps (e.g. 2^31 layers x 2^31 heads) would
  // otherwise validate with a small or 0-byte chunk.
  uint64_t bytes = 2ull * DTypeBytes(dtype);
  for (uint64_t factor : {uint64_t{layers}, uint64_t{kv_heads}, uint64_t{head_dim},
                          uint64_t{tokens_per_chunk}}) {
    if (__builtin_mul_overflow(bytes, factor, &bytes) || bytes > (4ull << 30)) {
      return Status::InvalidArgument("a chunk of layout " + ToString() + " would exceed 4 GiB");
    }
  }
  return Status::OK();
}

std::string Layout::ToString() const {
  return std::to_string(layers) + "x" + std::to_string(kv_heads) + "x" + std::to_string(head_dim) +
         " " + std::string(DTypeName(dtype)) + ", " + std::to_string(tokens_per_chunk) +
         " tokens/chunk";
}

namespace {

constexpr Layout Bf16(uint32_t layers, uint32_t kv_heads, uint32_t head_dim) {
  return Layout{layers, kv_heads, head_dim, DType::kBF16, kDefaultTokensPerChunk};
}

// Shapes from each model's published config.json.
constexpr std::array<ModelPreset, 5> kPresets = {{
    {"llama-3.1-8b", "meta-llama/Llama-3.1-8B", Bf16(32, 8, 128), 4096, 32, 8'030'000'000ull},
    {"llama-3.1-70b", "meta-llama/Llama-3.1-70B", Bf16(80, 8, 128), 8192, 64, 70'600'000'000ull},
    {"qwen2.5-32b", "Qwen/Qwen2.5-32B", Bf16(64, 8, 128), 5120, 40, 32'500'000'000ull},
    {"qwen3-coder-480b-a35b", "Qwen/Qwen3-Coder-480B-A35B-Instruct", Bf16(62, 8, 128), 6144, 96,
     35'000'000'000ull},
    {"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", Bf16(24, 2, 64), 896, 14, 494'000'000ull},
}};

}  // namespace

std::span<const ModelPreset> ModelPresets() { return kPresets; }

Result<ModelPreset> FindModelPreset(std::string_view name) {
  std::string known;
  for (const auto& p : kPresets) {
    if (p.name == name) return p;
    known += known.empty() ? "" : ", ";
    known += p.name;
  }
  return Status::InvalidArgument("unknown model preset '" + std::string(name) + "' (known: " + known +
                                 ")");
}

}  // namespace kvtier
