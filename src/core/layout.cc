#include "kvtier/layout.h"

#include "core/xxh3.h"

#include <algorithm>
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

std::string_view GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kKV: return "kv";
    case GroupKind::kLatent: return "latent";
    case GroupKind::kWindowKV: return "window";
    case GroupKind::kState: return "state";
  }
  return "unknown";
}

uint64_t LayerGroup::BytesPerTokenLayer() const {
  switch (kind) {
    case GroupKind::kKV:
    case GroupKind::kWindowKV: return uint64_t{kv_heads} * (uint64_t{k_head_dim} + v_head_dim) * DTypeBytes(dtype);
    case GroupKind::kLatent: return uint64_t{latent_dim} * DTypeBytes(dtype);
    case GroupKind::kState: return 0;
  }
  return 0;
}

std::vector<LayerGroup> Layout::Groups() const {
  if (!classic()) return groups;
  LayerGroup g;
  g.kind = GroupKind::kKV;
  g.dtype = dtype;
  g.kv_heads = kv_heads;
  g.k_head_dim = head_dim;
  g.v_head_dim = head_dim;
  g.layers.resize(layers);
  for (uint32_t i = 0; i < layers; ++i) g.layers[i] = i;
  return {g};
}

uint32_t Layout::HeadSplitHeads() const {
  if (classic()) return kv_heads;
  for (const LayerGroup& g : groups) {
    if (g.head_split()) return g.kv_heads;
  }
  return 0;
}

uint64_t Layout::BytesPerToken() const {
  if (classic()) return 2ull * layers * kv_heads * head_dim * DTypeBytes(dtype);
  uint64_t n = 0;
  for (const LayerGroup& g : groups) n += g.BytesPerTokenLayer() * g.layers.size();
  return n;
}

uint64_t Layout::StateBytes() const {
  uint64_t n = 0;
  for (const LayerGroup& g : groups) {
    if (g.kind == GroupKind::kState) n += g.state_bytes * g.layers.size();
  }
  return n;
}

uint64_t Layout::BytesPerChunk() const { return BytesPerToken() * tokens_per_chunk + StateBytes(); }

namespace {

struct Encoder {
  std::string buf;
  void U8(uint8_t v) { buf.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
};

uint64_t ClassicFingerprint(const Layout& l) {
  // Fixed little-endian encoding; never reorder: the fingerprint is stored in chunk headers.
  std::array<uint8_t, 21> buf{};
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) buf[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put32(0, 1);  // encoding version
  put32(4, l.layers);
  put32(8, l.kv_heads);
  put32(12, l.head_dim);
  buf[16] = static_cast<uint8_t>(l.dtype);
  put32(17, l.tokens_per_chunk);
  return XXH3_64bits(buf.data(), buf.size());
}

// Encoding version 2 (grouped form): u32 2 | layers u32 | tokens u32 | group count u32 | per group:
// kind u8 | dtype u8 | kv_heads u32 | k_head_dim u32 | v_head_dim u32 | latent_dim u32 | window u32 |
// state_bytes u64 | layer count u32 | layers u32 each. Never reorder.
uint64_t GroupedFingerprint(const Layout& l) {
  Encoder e;
  e.U32(2);
  e.U32(l.layers);
  e.U32(l.tokens_per_chunk);
  e.U32(static_cast<uint32_t>(l.groups.size()));
  for (const LayerGroup& g : l.groups) {
    e.U8(static_cast<uint8_t>(g.kind));
    e.U8(static_cast<uint8_t>(g.dtype));
    for (uint32_t v : {g.kv_heads, g.k_head_dim, g.v_head_dim, g.latent_dim, g.window}) e.U32(v);
    e.U64(g.state_bytes);
    e.U32(static_cast<uint32_t>(g.layers.size()));
    for (uint32_t layer : g.layers) e.U32(layer);
  }
  return XXH3_64bits(e.buf.data(), e.buf.size());
}

Status Bad(const Layout& l, const std::string& why) {
  return Status::InvalidArgument("layout " + l.ToString() + ": " + why);
}

Status ValidateGroup(const Layout& l, const LayerGroup& g, std::vector<bool>& seen) {
  const std::string name(GroupKindName(g.kind));
  if (name == "unknown") return Bad(l, "a group of unknown kind");
  if (DTypeBytes(g.dtype) == 0) return Bad(l, "a " + name + " group has an unknown dtype");
  if (g.layers.empty()) return Bad(l, "a " + name + " group has no layers");
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const uint32_t layer = g.layers[i];
    if (layer >= l.layers) return Bad(l, "layer " + std::to_string(layer) + " is past the model's layers");
    if (i > 0 && layer <= g.layers[i - 1]) return Bad(l, "a " + name + " group's layers are not ascending");
    if (seen[layer]) return Bad(l, "layer " + std::to_string(layer) + " is in two groups");
    seen[layer] = true;
  }
  if (g.head_split() && (g.kv_heads == 0 || g.k_head_dim == 0 || g.v_head_dim == 0)) {
    return Bad(l, "a " + name + " group needs heads and K and V head dims");
  }
  if (!g.head_split() && (g.kv_heads | g.k_head_dim | g.v_head_dim) != 0) {
    return Bad(l, "a " + name + " group has no heads and no K or V head dims");
  }
  if ((g.kind == GroupKind::kLatent) != (g.latent_dim > 0)) return Bad(l, "only a latent group has (and needs) a dim");
  if ((g.kind == GroupKind::kWindowKV) != (g.window > 0)) return Bad(l, "only a window group has (and needs) a window");
  if ((g.kind == GroupKind::kState) != (g.state_bytes > 0)) return Bad(l, "only a state group has (and needs) bytes");
  return Status::OK();
}

// Every product of a classic layout is checked: a geometry whose size wraps (e.g. 2^31 layers x 2^31
// heads) would otherwise validate with a small or 0-byte chunk.
Status ValidateClassic(const Layout& l) {
  if (l.layers == 0 || l.kv_heads == 0 || l.head_dim == 0 || l.tokens_per_chunk == 0) {
    return Status::InvalidArgument("layout fields must be positive: " + l.ToString());
  }
  if (DTypeBytes(l.dtype) == 0) return Status::InvalidArgument("layout has an unknown dtype");
  uint64_t bytes = 2ull * DTypeBytes(l.dtype);
  for (uint64_t factor : {uint64_t{l.layers}, uint64_t{l.kv_heads}, uint64_t{l.head_dim},
                          uint64_t{l.tokens_per_chunk}}) {
    if (__builtin_mul_overflow(bytes, factor, &bytes) || bytes > (4ull << 30)) {
      return Status::InvalidArgument("a chunk of layout " + l.ToString() + " would exceed 4 GiB");
    }
  }
  return Status::OK();
}

constexpr uint64_t kMaxChunkBytes = 4ull << 30;
constexpr uint32_t kMaxLayers = 1u << 16;
constexpr size_t kMaxGroups = 64;  // keeps every chunk's piece table within its header

}  // namespace

uint64_t Layout::Fingerprint() const { return classic() ? ClassicFingerprint(*this) : GroupedFingerprint(*this); }

Status Layout::Validate() const {
  if (classic()) return ValidateClassic(*this);
  if (kv_heads != 0 || head_dim != 0 || dtype != DType::kBF16) {
    return Bad(*this, "a grouped layout leaves kv_heads, head_dim and dtype at 0, 0, bf16");
  }
  if (layers == 0 || layers > kMaxLayers || tokens_per_chunk == 0) {
    return Bad(*this, "needs 1.." + std::to_string(kMaxLayers) + " layers and tokens per chunk");
  }
  if (groups.size() > kMaxGroups) return Bad(*this, "more than " + std::to_string(kMaxGroups) + " groups");
  std::vector<bool> seen(layers, false);
  uint32_t heads = 0;
  for (const LayerGroup& g : groups) {
    KVTIER_RETURN_IF_ERROR(ValidateGroup(*this, g, seen));
    if (g.head_split() && heads != 0 && g.kv_heads != heads) {
      return Bad(*this, "head-split groups differ in KV heads (a rank's heads must mean the same in each)");
    }
    if (g.head_split()) heads = g.kv_heads;
  }
  if (std::find(seen.begin(), seen.end(), false) != seen.end()) return Bad(*this, "a layer is in no group");
  // Bounded fields (dims below 2^32, layers below 2^16, bytes checked) keep every sum below 2^64.
  uint64_t bytes = 0;
  for (const LayerGroup& g : groups) {
    uint64_t per_layer = 0;
    if (g.kind == GroupKind::kState) {
      per_layer = g.state_bytes;
    } else if (__builtin_mul_overflow(g.BytesPerTokenLayer(), uint64_t{tokens_per_chunk}, &per_layer)) {
      per_layer = UINT64_MAX;
    }
    if (per_layer > kMaxChunkBytes) return Bad(*this, "a chunk would exceed 4 GiB");
    bytes += per_layer * g.layers.size();
    if (bytes > kMaxChunkBytes) return Bad(*this, "a chunk would exceed 4 GiB");
  }
  return Status::OK();
}

std::string Layout::ToString() const {
  if (!classic()) return Spec();
  return std::to_string(layers) + "x" + std::to_string(kv_heads) + "x" + std::to_string(head_dim) +
         " " + std::string(DTypeName(dtype)) + ", " + std::to_string(tokens_per_chunk) +
         " tokens/chunk";
}

Layout Layout::Grouped() const {
  if (!classic()) return *this;
  Layout out;
  out.layers = layers;
  out.tokens_per_chunk = tokens_per_chunk;
  out.groups = Groups();
  return out;
}

}  // namespace kvtier
