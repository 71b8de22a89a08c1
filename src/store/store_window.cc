// Sliding-window loads (docs/models.md, "Sliding-window loads"): a prefix load leaves unread, for each
// window group, the chunks that hold none of the last `window` tokens of the prefix, where the serving
// tier reads ranges. The read side of StoreImpl that plans and does those partial reads.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "core/chunk_format.h"
#include "core/threads.h"
#include "core/window_ranges.h"
#include "store/store_impl.h"

namespace kvtier::internal {
namespace {

// The spans of `dst` that hold `ranges` of the chunk, one after the other.
std::vector<std::span<std::byte>> RangeSpans(ScatterList dst, std::span<const ByteRange> ranges) {
  std::vector<std::span<std::byte>> out, part;
  for (const ByteRange& r : ranges) {
    SubList(dst, r.offset, r.bytes, part);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

void ZeroChunk(ScatterList dst) {
  for (const auto& piece : dst) {
    if (!piece.empty()) std::memset(piece.data(), 0, piece.size());
  }
}

// The ranges of `skip` that are not in `still` (a subset of it, both ascending).
std::vector<ByteRange> Difference(std::span<const ByteRange> skip, std::span<const ByteRange> still) {
  std::vector<ByteRange> out;
  for (const ByteRange& r : skip) {
    if (std::find(still.begin(), still.end(), r) == still.end()) out.push_back(r);
  }
  return out;
}

}  // namespace

std::vector<std::vector<ByteRange>> StoreImpl::PlanWindowSkips(const Layout& layout, size_t n) {
  const bool windowed = std::any_of(layout.groups.begin(), layout.groups.end(),
                                    [](const LayerGroup& g) { return g.kind == GroupKind::kWindowKV; });
  if (!windowed) return {};
  std::vector<std::vector<ByteRange>> skip(n);
  for (size_t i = 0; i < n; ++i) skip[i] = WindowSkippedRanges(layout, i, n);
  return skip;
}

Status StoreImpl::ReadChunk(int t, const ChunkId& id, ScatterList dst, std::span<const ByteRange> skip) {
  if (skip.empty() || !ReadsRanges(t)) return tiers_[static_cast<size_t>(t)]->Get(id, dst);
  const uint64_t bytes = TotalBytes(dst);
  const std::vector<ByteRange> keep = ComplementRanges(skip, bytes);
  const std::vector<std::span<std::byte>> spans = RangeSpans(dst, keep);
  return tiers_[static_cast<size_t>(t)]->GetRanges(id, bytes, keep, ScatterList(spans));
}

void StoreImpl::ReadRangedChunks(std::span<const size_t> which, std::span<const ChunkId> ids,
                                 std::span<const ScatterList> dsts, std::span<const int> from,
                                 std::span<const std::vector<ByteRange>> skip, std::vector<Status>& status) {
  status.assign(which.size(), Status::OK());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t j = next.fetch_add(1); j < which.size(); j = next.fetch_add(1)) {
      const size_t i = which[j];
      status[j] = ReadChunk(from[i], ids[i], dsts[i], skip[i]);
    }
  };
  // A ranged read is one chunk's synchronous reads: a few at once keep the storage busy.
  constexpr size_t kReaders = 4;
  std::vector<std::thread> helpers;
  for (size_t h = 1; h < std::min(kReaders, which.size()); ++h) {
    if (!TryStartThread(&helpers, work)) break;  // no thread to spare: fewer readers
  }
  work();
  for (auto& h : helpers) h.join();
}

size_t StoreImpl::ReadShortPrefixWindows(const Layout& layout, std::span<const ChunkId> ids,
                                         std::span<const ScatterList> dsts, std::span<const int> from,
                                         std::vector<bool>& read, std::vector<std::vector<ByteRange>>& skip,
                                         size_t loaded) {
  if (skip.empty()) return loaded;
  for (size_t i = 0; i < from.size(); ++i) {
    if (!ReadsRanges(from[i])) skip[i].clear();  // read whole
  }
  // A shorter prefix's window reaches further back: each failure shortens it again, so repeat until
  // every chunk of the prefix holds what its window needs.
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < loaded; ++i) {
      std::vector<ByteRange> still = WindowSkippedRanges(layout, i, loaded);
      const std::vector<ByteRange> need = Difference(skip[i], still);
      if (need.empty()) continue;
      const std::vector<std::span<std::byte>> spans = RangeSpans(dsts[i], need);
      const Status st = tiers_[static_cast<size_t>(from[i])]->GetRanges(ids[i], TotalBytes(dsts[i]), need,
                                                                        ScatterList(spans));
      if (!st.ok()) {
        ZeroChunk(dsts[i]);
        read[i] = true;  // bytes of it were in the destination: zeroed, and so is every later chunk's
        loaded = i;
        again = true;
        break;
      }
      skip[i] = std::move(still);
    }
  }
  return loaded;
}

}  // namespace kvtier::internal
