// The published model shapes kvtier knows by name (`kvtier models` lists them; docs/models.md quotes
// the sources). The five classic presets keep the layouts, and so the fingerprints, they always had.
#include <string>
#include <vector>

#include "kvtier/layout.h"

namespace kvtier {
namespace {

Layout Bf16(uint32_t layers, uint32_t kv_heads, uint32_t head_dim) {
  return Layout{layers, kv_heads, head_dim, DType::kBF16, kDefaultTokensPerChunk, {}};
}

// Layers first, first + step, ... up to `layers` (exclusive).
std::vector<uint32_t> Every(uint32_t first, uint32_t step, uint32_t layers) {
  std::vector<uint32_t> out;
  for (uint32_t l = first; l < layers; l += step) out.push_back(l);
  return out;
}

// Layers [0, layers) not in `taken` (ascending).
std::vector<uint32_t> Rest(const std::vector<uint32_t>& taken, uint32_t layers) {
  std::vector<uint32_t> out;
  size_t t = 0;
  for (uint32_t l = 0; l < layers; ++l) {
    if (t < taken.size() && taken[t] == l) {
      ++t;
    } else {
      out.push_back(l);
    }
  }
  return out;
}

LayerGroup Heads(GroupKind kind, std::vector<uint32_t> layers, uint32_t heads, uint32_t dim, uint32_t window = 0) {
  LayerGroup g;
  g.kind = kind;
  g.layers = std::move(layers);
  g.kv_heads = heads;
  g.k_head_dim = dim;
  g.v_head_dim = dim;
  g.window = window;
  return g;
}

Layout Grouped(uint32_t layers, std::vector<LayerGroup> groups) {
  Layout l;
  l.layers = layers;
  l.groups = std::move(groups);
  return l;
}

// DeepSeek-V3: every layer MLA; the cache keeps kv_lora_rank (512) + qk_rope_head_dim (64) values per
// token per layer. config.json: num_hidden_layers 61, kv_lora_rank 512, qk_rope_head_dim 64,
// num_attention_heads 128, hidden_size 7168 (deepseek-ai/DeepSeek-V3, inference/configs/config_671B.json:
// n_layers 61, kv_lora_rank 512, qk_rope_head_dim 64, n_heads 128, dim 7168).
Layout DeepSeekV3() {
  LayerGroup g;
  g.kind = GroupKind::kLatent;
  g.layers = Every(0, 1, 61);
  g.latent_dim = 512 + 64;
  return Grouped(61, {g});
}

// gpt-oss: layer_types alternate sliding_attention (even layers) and full_attention (odd layers);
// num_key_value_heads 8, head_dim 64, sliding_window 128 (openai/gpt-oss-120b and -20b config.json:
// num_hidden_layers 36 and 24).
Layout GptOss(uint32_t layers) {
  return Grouped(layers, {Heads(GroupKind::kWindowKV, Every(0, 2, layers), 8, 64, 128),
                          Heads(GroupKind::kKV, Every(1, 2, layers), 8, 64)});
}

// Gemma 3 27B: 62 layers, num_kv_heads 16, head_dim 128; the attention pattern repeats five local
// (sliding, window 1024) layers and one global layer, so layers 5, 11, ..., 59 are global.
// Source: google-deepmind/gemma, gemma/transformer.py, TransformerConfig.gemma3_27b and
// GEMMA3_ATTENTION_PATTERN (google/gemma-3-27b-it's config.json itself was not found with the search
// tools kvtier's developers use).
Layout Gemma3_27B() {
  const std::vector<uint32_t> global = Every(5, 6, 62);
  return Grouped(62, {Heads(GroupKind::kWindowKV, Rest(global, 62), 16, 128, 1024),
                      Heads(GroupKind::kKV, global, 16, 128)});
}

// Qwen3-Next-80B-A3B: 48 layers, full_attention_interval 4 (layers 3, 7, ..., 47 are gated attention:
// num_key_value_heads 2, head_dim 256); the other 36 are Gated DeltaNet layers whose per-sequence
// state is a recurrent state of linear_num_value_heads (32) x linear_key_head_dim (128) x
// linear_value_head_dim (128) values plus a convolution state of (2 x 16 x 128 + 32 x 128) channels x
// (linear_conv_kernel_dim 4 - 1) values: 548864 bf16 values, 1097728 bytes per layer (Qwen/Qwen3-Next-
// 80B-A3B-Instruct config.json; dtype bfloat16).
Layout Qwen3Next80B() {
  const std::vector<uint32_t> full = Every(3, 4, 48);
  LayerGroup state;
  state.kind = GroupKind::kState;
  state.layers = Rest(full, 48);
  state.state_bytes = (32ull * 128 * 128 + (2ull * 16 * 128 + 32 * 128) * 3) * 2;
  return Grouped(48, {Heads(GroupKind::kKV, full, 2, 256), state});
}

std::vector<ModelPreset> MakePresets() {
  constexpr std::string_view kHf = "config.json on Hugging Face";
  return {
      // Shapes from each model's published config.json (num_hidden_layers, num_key_value_heads,
      // head_dim or hidden_size / num_attention_heads).
      {"llama-3.1-8b", "meta-llama/Llama-3.1-8B", Bf16(32, 8, 128), 4096, 32, 8'030'000'000ull, kHf},
      {"llama-3.1-70b", "meta-llama/Llama-3.1-70B", Bf16(80, 8, 128), 8192, 64, 70'600'000'000ull, kHf},
      {"qwen2.5-32b", "Qwen/Qwen2.5-32B", Bf16(64, 8, 128), 5120, 40, 32'500'000'000ull, kHf},
      {"qwen3-coder-480b-a35b", "Qwen/Qwen3-Coder-480B-A35B-Instruct", Bf16(62, 8, 128), 6144, 96,
       35'000'000'000ull, kHf},
      {"qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", Bf16(24, 2, 64), 896, 14, 494'000'000ull, kHf},
      {"deepseek-v3", "deepseek-ai/DeepSeek-V3", DeepSeekV3(), 7168, 128, 37'000'000'000ull,
       "config.json; deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json"},
      {"gpt-oss-120b", "openai/gpt-oss-120b", GptOss(36), 2880, 64, 5'100'000'000ull, kHf},
      {"gpt-oss-20b", "openai/gpt-oss-20b", GptOss(24), 2880, 64, 3'600'000'000ull, kHf},
      {"gemma-3-27b", "google/gemma-3-27b-it", Gemma3_27B(), 5376, 32, 27'000'000'000ull,
       "google-deepmind/gemma gemma/transformer.py TransformerConfig.gemma3_27b"},
      {"qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct", Qwen3Next80B(), 2048, 16,
       3'000'000'000ull, kHf},
  };
}

}  // namespace

std::span<const ModelPreset> ModelPresets() {
  static const std::vector<ModelPreset> presets = MakePresets();
  return presets;
}

Result<ModelPreset> FindModelPreset(std::string_view name) {
  std::string known;
  for (const auto& p : ModelPresets()) {
    if (p.name == name) return p;
    known += known.empty() ? "" : ", ";
    known += p.name;
  }
  return Status::InvalidArgument("unknown model preset '" + std::string(name) + "' (known: " + known +
                                 ")");
}

Status RequireClassicLayout(const Layout& layout, std::string_view who) {
  if (layout.classic()) return Status::OK();
  std::string spec = layout.Spec();
  if (spec.size() > 200) spec = spec.substr(0, 200) + "...";
  return Status::InvalidArgument(std::string(who) + " handles only layouts of one K/V group over every layer; " +
                                 "this one has " + std::to_string(layout.groups.size()) + " group(s) (" + spec +
                                 "): see docs/models.md for what handles it");
}

}  // namespace kvtier
