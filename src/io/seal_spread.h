// Sealing the pieces of one encrypted chunk on more than one core. A writer seals its chunk's pieces
// window by window (io/chunk_writer.cc); when fewer threads than cores are sealing in this process (a
// Store with one background writer, a bench at one chunk in flight), the cores left idle help: some
// of a window's pieces go to helper threads of one process-wide pool, the writer seals the rest, and
// it returns once every piece is sealed. With as many sealing threads as cores (or one core) the
// writer seals every piece itself, as before; so does a process forked from one that made the pool
// (the pool's threads are not in the child).
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kvtier/status.h"

namespace kvtier::internal {

// Runs seal(i) once for every i in [0, n) and returns the first error (every call has returned by
// then, and every helper taken has left the count of sealing threads, so the caller's next spread
// finds its cores idle again). Helper k (1 <= k <= helpers) runs seal(k) first, so each helper taken seals at least one
// piece; the other pieces go to whichever thread is free first. seal must be safe to run for
// different i on several threads at once.
Status SealSpread(size_t n, const std::function<Status(size_t)>& seal);

// Pieces sealed by helper threads since the process started (tests, diagnostics).
uint64_t PiecesSealedByHelpers();

}  // namespace kvtier::internal
