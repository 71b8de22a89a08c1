// Layout: the KV-cache geometry of one model, which fixes the byte size and byte order of a chunk.
//
// A layout is a list of layer groups (docs/models.md), each one of:
//   kKV       per-token K and V heads (MHA/GQA): kv_heads x k_head_dim keys and kv_heads x v_head_dim
//             values per token per layer (K and V head dims may differ);
//   kWindowKV the same for sliding-window layers, which attend to the last `window` tokens only;
//   kLatent   a per-token latent (MLA): latent_dim values per token per layer, no K/V split, the same on
//             every tensor-parallel rank;
//   kState    a per-sequence state (linear attention, SSM): state_bytes per layer, not per token;
// each over its own set of layers and with its own dtype; every layer of the model is in exactly one group.
//
// Two forms, one model:
//   * the classic form, `groups` empty: one kKV group over every layer with kv_heads x head_dim for K and
//     for V. A chunk is 2 x layers pieces, layer 0 K, layer 0 V, layer 1 K, ... (core/chunk_geometry.h),
//     and the fingerprint is the one of every pool written before groups existed (kept bit for bit).
//   * the grouped form, `groups` set and kv_heads = head_dim = 0: any mix of groups, stored head-major so
//     that a tensor-parallel rank reads only its heads (docs/models.md, "Chunk piece order"). A grouped
//     layout that the classic form could describe is still a different layout: its byte order
//     differs, and so does its fingerprint.
// Layouts are plain values; every function here is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

enum class DType : uint8_t { kFP32 = 0, kFP16 = 1, kBF16 = 2, kFP8 = 3 };

size_t DTypeBytes(DType dtype);
std::string_view DTypeName(DType dtype);  // "fp32", "fp16", "bf16", "fp8"
Result<DType> ParseDType(std::string_view name);

inline constexpr uint32_t kDefaultTokensPerChunk = 256;

enum class GroupKind : uint8_t { kKV = 0, kLatent = 1, kWindowKV = 2, kState = 3 };
std::string_view GroupKindName(GroupKind kind);  // "kv", "latent", "window", "state"

struct LayerGroup {
  GroupKind kind = GroupKind::kKV;
  std::vector<uint32_t> layers;  // strictly ascending layer indices
  DType dtype = DType::kBF16;
  uint32_t kv_heads = 0;    // kKV, kWindowKV
  uint32_t k_head_dim = 0;  // kKV, kWindowKV
  uint32_t v_head_dim = 0;  // kKV, kWindowKV
  uint32_t latent_dim = 0;  // kLatent: kv_lora_rank + rope dims
  uint32_t window = 0;      // kWindowKV: tokens attended to
  uint64_t state_bytes = 0; // kState: bytes per layer per sequence

  // Per-token groups: one token of one layer; kState: 0.
  uint64_t BytesPerTokenLayer() const;
  // Split across tensor-parallel ranks by head (kKV, kWindowKV); latents and states are stored once.
  bool head_split() const { return kind == GroupKind::kKV || kind == GroupKind::kWindowKV; }
  bool operator==(const LayerGroup&) const = default;
};

// A contiguous byte range of a chunk's payload.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool operator==(const ByteRange&) const = default;
};

struct Layout {
  uint32_t layers = 0;    // both forms: the model's layer count
  uint32_t kv_heads = 0;  // classic form only (0 in the grouped form)
  uint32_t head_dim = 0;  // classic form only (0 in the grouped form)
  DType dtype = DType::kBF16;  // classic form only (kBF16, unused, in the grouped form)
  uint32_t tokens_per_chunk = kDefaultTokensPerChunk;
  std::vector<LayerGroup> groups{};  // empty: the classic form

  bool classic() const { return groups.empty(); }
  // The groups of either form (the classic form's one kKV group over every layer).
  std::vector<LayerGroup> Groups() const;
  // Heads of the head-split groups (all of them have the same count; Validate checks); 0 when none.
  uint32_t HeadSplitHeads() const;

  // Per-token bytes of every layer (states excluded).
  uint64_t BytesPerToken() const;
  // Bytes of every state group's layers (a per-sequence state, stored once in each chunk); 0 when none.
  uint64_t StateBytes() const;
  // Bytes of one chunk: tokens_per_chunk tokens of per-token groups, then every state group once.
  uint64_t BytesPerChunk() const;
  // Stable across processes, hosts and versions of kvtier: an xxHash3 of a fixed encoding of the fields
  // (classic form: the encoding of every earlier version, unchanged).
  uint64_t Fingerprint() const;
  // InvalidArgument when a field is zero, a group is malformed, the groups do not cover every layer
  // exactly once, head-split groups differ in head count, or the chunk would exceed 4 GiB.
  Status Validate() const;
  // Classic: "32x8x128 bf16, 256 tokens/chunk"; grouped: its spec.
  std::string ToString() const;
  // The canonical text of the layout, which ParseLayoutSpec turns back into this very layout, e.g.
  //   "layers=32 tokens=256 classic:heads=8,dim=128,dtype=bf16"
  //   "layers=61 tokens=256 latent:layers=0-60,dim=576,dtype=bf16"
  std::string Spec() const;
  // The grouped form of a classic layout: same groups, head-major chunk order, another fingerprint.
  Layout Grouped() const;

  // Where heads [begin, end) of every head-split group, and every latent and state group, lie in a
  // chunk of this grouped layout, in chunk order (adjacent ranges merged). A tensor-parallel rank that
  // owns those heads reads exactly these bytes; their concatenation is the chunk of the same layout with
  // `end - begin` heads (SliceHeads). InvalidArgument for the classic form (its heads are interleaved:
  // load it whole) or a range not within [0, HeadSplitHeads()); a layout without head-split groups
  // (MLA only) takes [0, 0): every rank reads the whole chunk.
  Result<std::vector<ByteRange>> HeadRanges(uint32_t begin, uint32_t end) const;
  // The layout of the part of a chunk HeadRanges(begin, end) selects (head-split groups with
  // end - begin heads; the rest unchanged).
  Result<Layout> SliceHeads(uint32_t begin, uint32_t end) const;
  // The payload's verification pieces for a writer (chunk format v2 "listed pieces"): one per head of
  // each head-split group, one per layer (or per group, when layers would make too many) of the rest,
  // so that every range of HeadRanges is a whole number of pieces. Empty for the classic form (the
  // writer's default, power-of-two pieces).
  std::vector<uint64_t> PieceLengths() const;
  // PieceLengths() kept for the life of the process, one vector per distinct layout (a few hundred
  // bytes each), so a ChunkId can point at it; nullptr for the classic form.
  const std::vector<uint64_t>* InternedPieceLengths() const;

  // The gather list of a whole chunk assembled from the parts of parts.size() tensor-parallel ranks,
  // rank r's part being the chunk of SliceHeads(r * H / t, (r + 1) * H / t): each head-split group from
  // every rank in rank order, each latent and state group from rank 0 alone (stored once). The spans
  // point into `parts`; nothing is copied. InvalidArgument for the classic form, a rank count that does
  // not divide the heads, or a part of the wrong size.
  Result<std::vector<std::span<const std::byte>>> AssembleFromRanks(
      std::span<const std::span<const std::byte>> parts) const;

  bool operator==(const Layout&) const = default;
};

// Parses the text Layout::Spec prints:
//   layers=<n> tokens=<tokens per chunk> classic:heads=<h>,dim=<d>,dtype=<t>     (the classic form)
//   layers=<n> tokens=<tokens per chunk> <group> [<group> ...]                   (the grouped form)
//   group: kv:layers=<set>,heads=<h>,dim=<d>[,v_dim=<d>],dtype=<t>
//          window:layers=<set>,heads=<h>,dim=<d>[,v_dim=<d>],window=<w>,dtype=<t>
//          latent:layers=<set>,dim=<d>,dtype=<t>
//          state:layers=<set>,bytes=<n>,dtype=<t>
//   set: items separated by '+': <a>, <a>-<b> (inclusive) or <a>-<b>/<step>
// Items are separated by single spaces. InvalidArgument for anything else, or a layout that does not
// validate.
Result<Layout> ParseLayoutSpec(std::string_view spec);

// A published model shape: its KV layout and the figures needed to estimate prefill compute.
struct ModelPreset {
  std::string_view name;      // lower case CLI name, e.g. "llama-3.1-8b"
  std::string_view model_id;  // e.g. "meta-llama/Llama-3.1-8B"
  Layout layout;              // 256 tokens per chunk
  uint32_t hidden_size = 0;
  uint32_t q_heads = 0;
  uint64_t active_params = 0;  // parameters touched per token (MoE: active experts only)
  std::string_view source;     // where the shape was read (config.json and its revision)
};

std::span<const ModelPreset> ModelPresets();
// InvalidArgument naming the known presets when `name` is unknown.
Result<ModelPreset> FindModelPreset(std::string_view name);
// InvalidArgument, naming `who` and the preset, unless `layout` is classic: for the benches, engines
// and paths that know only one K/V group over every layer.
Status RequireClassicLayout(const Layout& layout, std::string_view who);

}  // namespace kvtier
