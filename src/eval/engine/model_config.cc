#include "eval/engine/model_config.h"

#include <array>

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 3> kNames = {"tiny", "small", "qwen2.5-0.5b"};

ModelConfig Tiny() {
  ModelConfig c;
  c.name = "tiny";
  c.vocab = 256;
  c.hidden = 64;
  c.layers = 2;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.ffn = 128;
  c.tokens_per_chunk = 16;
  return c;
}

ModelConfig Small() {
  ModelConfig c;
  c.name = "small";
  c.vocab = 32000;
  c.hidden = 512;
  c.layers = 4;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.ffn = 1536;
  c.tokens_per_chunk = 256;
  return c;
}

ModelConfig Qwen05B() {
  ModelConfig c;
  c.name = "qwen2.5-0.5b";
  c.vocab = 151936;
  c.hidden = 896;
  c.layers = 24;
  c.q_heads = 14;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.ffn = 4864;
  c.rope_theta = 1000000.f;
  c.tokens_per_chunk = 256;
  return c;
}

}  // namespace

Layout ModelConfig::KvLayout() const {
  return Layout{layers, kv_heads, head_dim, kv_dtype, tokens_per_chunk};
}

std::string ModelConfig::ModelId() const {
  return "kvtier-ref/" + name + "/v" + std::to_string(vocab) + "-h" + std::to_string(hidden) + "-l" +
         std::to_string(layers) + "-q" + std::to_string(q_heads) + "-kv" + std::to_string(kv_heads) +
         "-d" + std::to_string(head_dim) + "-f" + std::to_string(ffn) + "/seed" + std::to_string(seed);
}

uint64_t ModelConfig::ParameterCount() const {
  uint64_t per_layer = uint64_t{hidden} * q_heads * head_dim * 2 +      // q and o
                       uint64_t{hidden} * kv_heads * head_dim * 2 +     // k and v
                       uint64_t{hidden} * ffn * 3 + uint64_t{hidden} * 2;  // gate, up, down, norms
  return uint64_t{vocab} * hidden + per_layer * layers + hidden;        // tied embedding/LM head
}

Status ModelConfig::Validate() const {
  if (vocab == 0 || hidden == 0 || layers == 0 || q_heads == 0 || kv_heads == 0 || head_dim == 0 ||
      ffn == 0 || tokens_per_chunk == 0) {
    return Status::InvalidArgument("model config '" + name + "' has a zero field");
  }
  if (q_heads % kv_heads != 0) {
    return Status::InvalidArgument("q_heads must be a multiple of kv_heads");
  }
  if (head_dim % 2 != 0) return Status::InvalidArgument("head_dim must be even for RoPE");
  if (kv_dtype != DType::kBF16 && kv_dtype != DType::kFP16) {
    return Status::InvalidArgument("the KV pool keeps bf16 or fp16, not " +
                                   std::string(DTypeName(kv_dtype)));
  }
  return KvLayout().Validate();
}

std::span<const std::string_view> ModelConfigNames() { return kNames; }

Result<ModelConfig> FindModelConfig(std::string_view name) {
  if (name == "tiny") return Tiny();
  if (name == "small") return Small();
  if (name == "qwen2.5-0.5b") return Qwen05B();
  std::string known;
  for (std::string_view n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  return Status::InvalidArgument("unknown model config '" + std::string(name) + "' (known: " + known +
                                 ")");
}

}  // namespace kvtier::internal
