// mem://?capacity=SIZE[&page=SIZE][&verify=BOOL][&threads=N]: the in-process memory tier.
//
// A byte-budgeted LRU over one reservation of `capacity` bytes (default 1GiB), cut into pages of
// `page` bytes (default 64KiB; small pages such as page=64 suit tiny chunks). Usage counts whole pages
// and never exceeds capacity; least recently used chunks are evicted to make room, and a chunk larger
// than the capacity is refused with NoSpace. Storing and reading chunks never calls malloc.
//
// verify (default false): the bytes of this tier never leave process memory, so by default they are
// not checksummed. verify=true keeps an xxh3 of each chunk and checks it on every Get and Check
// (a mismatch is reported as Corruption and the chunk removed); it costs one hash pass per access.
//
// threads (default 0: one per core): a read of at least 4 MiB is copied in 2 MiB slices by the
// caller and up to threads - 1 helper threads (started at the first such read), so one Load moves
// bytes at the speed of several cores. threads=1 copies on the caller's thread only.
//
// Borrow lends a chunk in place (kvtier/borrowed_chunk.h): a pinned, read-only view of its arena
// pages, verified first when verify=true. The pages come from TierOpenOptions::host_allocator when
// given (e.g. pinned memory a GPU copies from at full speed), else an anonymous mapping. Hold pins a
// chunk the same way without touching its place in the eviction order; held chunks take at most a
// quarter of the pages.
//
// Not persistent: a new tier starts empty. Thread-safe, as every Tier.
#pragma once

#include <memory>

#include "kvtier/tier.h"

namespace kvtier::internal {

// InvalidArgument for unknown options or malformed sizes; IOError when memory cannot be reserved.
Result<std::unique_ptr<Tier>> OpenMemTier(const TierUrl& url, const TierOpenOptions& open = {});

// Test hook: flips one payload byte of a stored chunk of a mem:// tier, behind the tier's back, so
// tests can check that corruption is detected. NotFound when the chunk is absent; InvalidArgument when
// `tier` is not a mem:// tier.
Status CorruptMemChunkForTesting(Tier& tier, const ChunkId& id);

}  // namespace kvtier::internal
