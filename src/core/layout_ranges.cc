// Where a grouped layout's bytes lie in a chunk (docs/models.md, "Chunk piece order"): groups in their
// listed order; a head-split group head-major (for each head, for each of its layers, the K rows of the
// chunk's tokens then the V rows), a latent or state group layer-major. So the heads [a, b) of a group
// are one contiguous range, and a tensor-parallel rank reads one range per group.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "core/thread_annotations.h"
#include "core/window_ranges.h"
#include "kvtier/layout.h"

namespace kvtier {
namespace {

// One head's bytes of a head-split group in a chunk (all its layers, K and V).
uint64_t HeadBytes(const LayerGroup& g, uint32_t tokens) {
  return uint64_t{tokens} * g.layers.size() * (uint64_t{g.k_head_dim} + g.v_head_dim) * DTypeBytes(g.dtype);
}

// One layer's bytes of a latent or state group in a chunk.
uint64_t SharedLayerBytes(const LayerGroup& g, uint32_t tokens) {
  return g.kind == GroupKind::kState ? g.state_bytes : uint64_t{tokens} * g.latent_dim * DTypeBytes(g.dtype);
}

uint64_t GroupBytes(const LayerGroup& g, uint32_t tokens) {
  return g.head_split() ? HeadBytes(g, tokens) * g.kv_heads : SharedLayerBytes(g, tokens) * g.layers.size();
}

// Appends `n` bytes as pieces of at most the format's largest piece.
void AppendPieces(uint64_t n, std::vector<uint64_t>* out) {
  while (n > internal::kMaxPieceBytes) {
    out->push_back(internal::kMaxPieceBytes);
    n -= internal::kMaxPieceBytes;
  }
  out->push_back(n);
}

// Pieces of `heads_per_piece` heads per head-split group and one per layer of the other groups (or
// one per such group, when `shared_whole`).
std::vector<uint64_t> Plan(const Layout& l, uint32_t heads_per_piece, bool shared_whole) {
  std::vector<uint64_t> out;
  for (const LayerGroup& g : l.groups) {
    if (g.head_split()) {
      for (uint32_t h = 0; h < g.kv_heads; h += heads_per_piece) {
        AppendPieces(HeadBytes(g, l.tokens_per_chunk) * std::min(heads_per_piece, g.kv_heads - h), &out);
      }
    } else if (shared_whole) {
      AppendPieces(GroupBytes(g, l.tokens_per_chunk), &out);
    } else {
      for (size_t i = 0; i < g.layers.size(); ++i) AppendPieces(SharedLayerBytes(g, l.tokens_per_chunk), &out);
    }
  }
  return out;
}

// The piece plans ChunkIds point at: one per distinct grouped layout, never freed.
struct InternTable {
  internal::Mutex mu;
  std::map<std::string, std::unique_ptr<const std::vector<uint64_t>>> by_spec GUARDED_BY(mu);
};

InternTable& Interned() {
  static InternTable* table = new InternTable();  // never destroyed: ChunkIds may outlive statics
  return *table;
}

}  // namespace

Result<std::vector<ByteRange>> Layout::HeadRanges(uint32_t begin, uint32_t end) const {
  if (classic()) {
    return Status::InvalidArgument("layout " + ToString() +
                                   " stores every layer's heads interleaved (classic form): load its chunks whole, "
                                   "or use its grouped form for head-range reads");
  }
  const uint32_t heads = HeadSplitHeads();
  if (begin > end || end > heads || (heads > 0 && begin == end)) {
    return Status::InvalidArgument("heads [" + std::to_string(begin) + ", " + std::to_string(end) +
                                   ") are not a range of the layout's " + std::to_string(heads) + " KV heads");
  }
  std::vector<ByteRange> out;
  uint64_t at = 0;
  auto add = [&](uint64_t offset, uint64_t bytes) {
    if (!out.empty() && out.back().offset + out.back().bytes == offset) {
      out.back().bytes += bytes;
    } else {
      out.push_back({offset, bytes});
    }
  };
  for (const LayerGroup& g : groups) {
    if (g.head_split()) {
      const uint64_t head = HeadBytes(g, tokens_per_chunk);
      add(at + head * begin, head * (end - begin));
    } else {
      add(at, GroupBytes(g, tokens_per_chunk));
    }
    at += GroupBytes(g, tokens_per_chunk);
  }
  return out;
}

Result<Layout> Layout::SliceHeads(uint32_t begin, uint32_t end) const {
  KVTIER_RETURN_IF_ERROR(HeadRanges(begin, end).status());
  Layout out = *this;
  for (LayerGroup& g : out.groups) {
    if (g.head_split()) g.kv_heads = end - begin;
  }
  return out;
}

Result<std::vector<std::span<const std::byte>>> Layout::AssembleFromRanks(
    std::span<const std::span<const std::byte>> parts) const {
  const uint32_t t = static_cast<uint32_t>(parts.size());
  const uint32_t heads = HeadSplitHeads();
  if (classic() || t == 0 || (heads > 0 && heads % t != 0)) {
    return Status::InvalidArgument("cannot assemble a chunk of " + ToString() + " from " + std::to_string(t) +
                                   " ranks: a grouped layout whose KV heads the ranks divide");
  }
  const uint32_t per_rank = heads / t;
  for (uint32_t r = 0; r < t; ++r) {
    KVTIER_ASSIGN_OR_RETURN(Layout slice, SliceHeads(r * per_rank, (r + 1) * per_rank));
    if (parts[r].size() != slice.BytesPerChunk()) {
      return Status::InvalidArgument("rank " + std::to_string(r) + "'s part holds " + std::to_string(parts[r].size()) +
                                     " bytes, not " + std::to_string(slice.BytesPerChunk()));
    }
  }
  std::vector<std::span<const std::byte>> out;
  uint64_t at = 0;  // where the group starts in a rank's part
  for (const LayerGroup& g : groups) {
    if (g.head_split()) {
      const uint64_t n = HeadBytes(g, tokens_per_chunk) * per_rank;
      for (uint32_t r = 0; r < t; ++r) out.push_back(parts[r].subspan(at, n));
      at += n;
    } else {
      const uint64_t n = GroupBytes(g, tokens_per_chunk);
      out.push_back(parts[0].subspan(at, n));
      at += n;
    }
  }
  return out;
}

const std::vector<uint64_t>* Layout::InternedPieceLengths() const {
  if (classic()) return nullptr;
  InternTable& t = Interned();
  const std::string spec = Spec();
  internal::MutexLock lock(t.mu);
  auto& slot = t.by_spec[spec];
  if (slot == nullptr) slot = std::make_unique<const std::vector<uint64_t>>(PieceLengths());
  return slot.get();
}

std::vector<uint64_t> Layout::PieceLengths() const {
  if (classic()) return {};
  // The finest plan that fits the header's table: every head its own piece if possible.
  std::vector<uint64_t> plan = Plan(*this, 1, false);
  if (plan.size() > internal::kMaxListedPieces) plan = Plan(*this, 1, true);
  // Validate bounds the groups, so once a piece holds every head of a group the plan fits.
  for (uint32_t merge = 2; plan.size() > internal::kMaxListedPieces && merge <= (1u << 31); merge *= 2) plan = Plan(*this, merge, true);
  return plan;
}

namespace internal {

std::vector<ByteRange> WindowSkippedRanges(const Layout& layout, uint64_t chunk, uint64_t prefix_chunks) {
  std::vector<ByteRange> out;
  const uint64_t tokens = layout.tokens_per_chunk;
  uint64_t at = 0;
  for (const LayerGroup& g : layout.groups) {
    const uint64_t bytes = GroupBytes(g, layout.tokens_per_chunk);
    if (g.kind == GroupKind::kWindowKV && (chunk + 1) * tokens + g.window <= prefix_chunks * tokens) {
      out.push_back({at, bytes});
    }
    at += bytes;
  }
  return out;
}

std::vector<ByteRange> ComplementRanges(std::span<const ByteRange> skip, uint64_t total) {
  std::vector<ByteRange> out;
  uint64_t at = 0;
  for (const ByteRange& r : skip) {
    if (r.offset > at) out.push_back({at, r.offset - at});
    at = r.offset + r.bytes;
  }
  if (total > at) out.push_back({at, total - at});
  return out;
}

uint64_t RangeBytes(std::span<const ByteRange> ranges) {
  uint64_t n = 0;
  for (const ByteRange& r : ranges) n += r.bytes;
  return n;
}

}  // namespace internal
}  // namespace kvtier
