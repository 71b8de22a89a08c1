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
  return Status::InvalidArgument(std::string(who) + " handles only layouts of one K/V group over every layer; " +
                                 "this one has " + std::to_string(layout.groups.size()) +
                                 " group(s) (" + layout.Spec().substr(0, 160) +
                                 "...): see docs/models.md for what handles it");
}

}  // namespace kvtier
