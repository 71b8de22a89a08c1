#include "eval/engine/model_config.h"

#include <algorithm>
#include <array>

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 6> kNames = {"tiny",     "small",   "qwen2.5-0.5b",
                                                    "tiny-window", "tiny-mla", "tiny-hybrid"};

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

// The variants' presets: tiny's size with 4 KV heads (so TP 1, 2 and 4 divide them) and 8 query heads.
ModelConfig TinyVariant(std::string name, std::vector<LayerKind> kinds) {
  ModelConfig c = Tiny();
  c.name = std::move(name);
  c.layers = static_cast<uint32_t>(kinds.size());
  c.q_heads = 8;
  c.kv_heads = 4;
  c.kinds = std::move(kinds);
  return c;
}

ModelConfig TinyWindow() {
  using K = LayerKind;
  ModelConfig c = TinyVariant("tiny-window", {K::kWindow, K::kFull, K::kWindow, K::kFull});
  c.window = 20;  // a chunk and a bit: a prefix load leaves all but its last two chunks' window rows unread
  return c;
}

ModelConfig TinyMla() {
  ModelConfig c = TinyVariant("tiny-mla", {LayerKind::kMla, LayerKind::kMla});
  c.q_heads = 4;
  c.kv_lora_rank = 24;
  c.rope_dim = 8;
  return c;
}

ModelConfig TinyHybrid() {
  using K = LayerKind;
  return TinyVariant("tiny-hybrid", {K::kLinear, K::kLinear, K::kLinear, K::kFull});
}

std::vector<uint32_t> LayersOf(const ModelConfig& c, LayerKind kind) {
  std::vector<uint32_t> out;
  for (uint32_t l = 0; l < c.layers; ++l) {
    if (c.KindOf(l) == kind) out.push_back(l);
  }
  return out;
}

}  // namespace

bool ModelConfig::Has(LayerKind kind) const {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

Layout ModelConfig::KvLayout() const {
  if (kinds.empty()) return Layout{layers, kv_heads, head_dim, kv_dtype, tokens_per_chunk};
  Layout out;
  out.layers = layers;
  out.kv_heads = 0;
  out.head_dim = 0;
  out.tokens_per_chunk = tokens_per_chunk;
  for (LayerKind kind : {LayerKind::kFull, LayerKind::kWindow, LayerKind::kMla, LayerKind::kLinear}) {
    LayerGroup g;
    g.layers = LayersOf(*this, kind);
    if (g.layers.empty()) continue;
    g.dtype = kv_dtype;
    if (kind == LayerKind::kFull || kind == LayerKind::kWindow) {
      g.kind = kind == LayerKind::kFull ? GroupKind::kKV : GroupKind::kWindowKV;
      g.kv_heads = kv_heads;
      g.k_head_dim = g.v_head_dim = head_dim;
      g.window = kind == LayerKind::kWindow ? window : 0;
    } else if (kind == LayerKind::kMla) {
      g.kind = GroupKind::kLatent;
      g.latent_dim = latent_dim();
    } else {
      g.kind = GroupKind::kState;
      g.dtype = DType::kFP32;  // the state is kept exactly as computed
      g.state_bytes = state_bytes();
    }
    out.groups.push_back(std::move(g));
  }
  return out;
}

std::string ModelConfig::ModelId() const {
  return "kvtier-ref/" + name + "/v" + std::to_string(vocab) + "-h" + std::to_string(hidden) + "-l" +
         std::to_string(layers) + "-q" + std::to_string(q_heads) + "-kv" + std::to_string(kv_heads) +
         "-d" + std::to_string(head_dim) + "-f" + std::to_string(ffn) + VariantId() + "/seed" +
         std::to_string(seed);
}

// Empty for the classic configs (their ids, and so their namespaces, are unchanged).
std::string ModelConfig::VariantId() const {
  if (kinds.empty()) return "";
  std::string id = "-";
  for (LayerKind k : kinds) id += "fwml"[static_cast<int>(k)];
  if (window != 0) id += "-w" + std::to_string(window);
  if (kv_lora_rank != 0) id += "-r" + std::to_string(kv_lora_rank) + "-p" + std::to_string(rope_dim);
  return id;
}

uint64_t ModelConfig::ParameterCount() const {
  const uint64_t common = uint64_t{hidden} * q_heads * head_dim * 2 +      // q and o
                          uint64_t{hidden} * ffn * 3 + uint64_t{hidden} * 2;  // gate, up, down, norms
  uint64_t total = uint64_t{vocab} * hidden + hidden;  // tied embedding/LM head, final norm
  for (uint32_t l = 0; l < layers; ++l) {
    total += common + (KindOf(l) == LayerKind::kMla
                           ? uint64_t{hidden} * latent_dim() +                    // down to [c, k_rope]
                                 uint64_t{kv_lora_rank} * q_heads * head_dim * 2  // up to K (nope part) and V
                           : uint64_t{hidden} * kv_heads * head_dim * 2);         // k and v
  }
  return total;
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
  KVTIER_RETURN_IF_ERROR(ValidateVariants());
  return KvLayout().Validate();
}

Status ModelConfig::ValidateVariants() const {
  if (kinds.empty()) return Status::OK();
  if (kinds.size() != layers) {
    return Status::InvalidArgument("model config '" + name + "' names the kinds of " +
                                   std::to_string(kinds.size()) + " of its " + std::to_string(layers) + " layers");
  }
  if ((window > 0) != Has(LayerKind::kWindow)) {
    return Status::InvalidArgument("model config '" + name + "': a window is set exactly when window layers exist");
  }
  if (Has(LayerKind::kMla) != (kv_lora_rank > 0) || (rope_dim > 0) != (kv_lora_rank > 0) || rope_dim % 2 != 0 ||
      rope_dim >= head_dim) {
    return Status::InvalidArgument("model config '" + name +
                                   "': MLA layers need kv_lora_rank and an even rope_dim below head_dim");
  }
  return Status::OK();
}

std::span<const std::string_view> ModelConfigNames() { return kNames; }

Result<ModelConfig> FindModelConfig(std::string_view name) {
  if (name == "tiny") return Tiny();
  if (name == "small") return Small();
  if (name == "qwen2.5-0.5b") return Qwen05B();
  if (name == "tiny-window") return TinyWindow();
  if (name == "tiny-mla") return TinyMla();
  if (name == "tiny-hybrid") return TinyHybrid();
  std::string known;
  for (std::string_view n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  return Status::InvalidArgument("unknown model config '" + std::string(name) + "' (known: " + known +
                                 ")");
}

}  // namespace kvtier::internal
