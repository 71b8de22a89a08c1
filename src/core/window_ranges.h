// Which bytes of a chunk a prefix load may leave unread (docs/models.md, "Sliding-window loads"): a
// `window` group attends to the last `window` tokens only, so its bytes in a chunk that holds none of the
// last `window` tokens of the loaded prefix are never needed. Plain functions of a Layout: thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/layout.h"

namespace kvtier::internal {

// The ranges of chunk `chunk` (0-based) that a load of a prefix of `prefix_chunks` chunks does not need:
// one per window group whose window W holds none of the chunk's tokens, i.e.
// (chunk + 1) x tokens_per_chunk + W <= prefix_chunks x tokens_per_chunk; ascending, not merged (each a
// whole group, so a whole number of the chunk's listed pieces). Empty for the classic form, layouts
// without window groups and chunks inside every window. REQUIRES: chunk < prefix_chunks.
std::vector<ByteRange> WindowSkippedRanges(const Layout& layout, uint64_t chunk, uint64_t prefix_chunks);

// The ranges of [0, total) outside `skip` (ascending, disjoint ranges within it), ascending and merged.
std::vector<ByteRange> ComplementRanges(std::span<const ByteRange> skip, uint64_t total);

// The sum of the ranges' bytes.
uint64_t RangeBytes(std::span<const ByteRange> ranges);

}  // namespace kvtier::internal
