// The in-memory reference of `kvtier bench datapath --target mem://`: what `threads` threads copying
// the same bytes with plain memcpy reach on this host, measured in the same run as the tier's load.
// A memory tier's load is a verified copy out of its arena, so this is its hardware limit.
// Stateless; thread-compatible.
#pragma once

#include <cstddef>
#include <span>

#include "eval/benchlib/results.h"

namespace kvtier::internal {

// Copies the first half of `area` onto its second half, then back, split into `threads` contiguous
// slices copied at once: area.size() bytes move in all, between DRAM pages the caller has already
// touched (so page faults are not timed). `area`'s contents are overwritten. threads == 0 means one
// per core. The result counts bytes moved and `chunks` = threads.
PhaseResult ParallelMemcpyReference(std::span<std::byte> area, unsigned threads = 0);

// One per core (std::thread::hardware_concurrency, at least 1).
unsigned MemcpyReferenceThreads();

}  // namespace kvtier::internal
