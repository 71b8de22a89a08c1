// shm://NAME?capacity=SIZE[&page=SIZE][&hugepages=DIR | &dir=DIR][&group=G][&threads=N][&key_file=PATH]: one memory pool
// per host in a shared-memory file (/dev/shm/kvtier-shm-NAME), mapped by every process that opens it:
// the chunks, their index and the allocation state all live in the file, so the pool outlives the
// processes that use it, and any of them may die at any instruction without a coordinator
// (docs/shared-pool.md; the crash-safety argument: docs/architecture.md, "shm:// crash safety").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <vector>

#include "core/namespace_usage.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

Result<std::unique_ptr<Tier>> OpenShmTier(const TierUrl& url, const TierOpenOptions& open);

// For tests: flips one payload byte of `id` in the arena behind the tier's back; with `forge_sums`, also
// rewrites that piece's checksum and the table's to match (only an encrypted pool's tags then catch it).
Status CorruptShmChunkForTesting(Tier& tier, const ChunkId& id, bool forge_sums = false);

// `kvtier stats`: chunks and bytes per namespace, from the pool's slots (published chunks only: a writer's
// reservation belongs to no namespace yet, so the sum can be below Stats().usage_bytes while one is
// writing), in namespace order. A read-only opener reads the slots without the lock and keeps only the
// slots whose state did not change while it read them. InvalidArgument for a tier that is not shm://.
Result<std::vector<NamespaceUsage>> ShmNamespaceUsage(Tier& tier);

// Tier::HostRegions of shm://: the whole mapping of a writable opener of a plain pool, where Borrow's
// views and every read's source lie. None for a read-only opener (its mapping is PROT_READ) or an
// encrypted pool (the arena holds ciphertext; Borrow lends opened copies).

// For tests and `kvtier shm list`: a consistency audit of the pool under its lock (which it takes,
// repairing first where a dead process held it).
struct ShmAudit {
  uint64_t used_pages = 0;        // the pool's usage count
  uint64_t bitmap_pages = 0;      // pages marked in use
  uint64_t slot_pages = 0;        // pages owned by reserved, published or dead slots
  uint64_t published_pages = 0;   // pages of published chunks
  uint64_t reserved_slots = 0, published_slots = 0, dead_slots = 0, pinned_slots = 0;
  uint64_t indexed = 0;           // index entries that lead to a published slot of the same key
  uint64_t live_chunks = 0;       // the pool's chunk count
  uint64_t capacity_bytes = 0, page_bytes = 0, page_count = 0;
  uint64_t repairs = 0, reclaimed = 0, evictions = 0;
  bool consistent() const {
    return used_pages == bitmap_pages && bitmap_pages == slot_pages && indexed == published_slots &&
           live_chunks == published_slots && used_pages * page_bytes <= capacity_bytes;
  }
};
// `reclaim`: first take back what dead processes hold (as any writer would).
Result<ShmAudit> AuditShmTier(Tier& tier, bool reclaim);

}  // namespace kvtier::internal
