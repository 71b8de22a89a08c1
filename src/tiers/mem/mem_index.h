// ChunkIndex: the entry pool, hash table and the two recency lists (window and main, see
// core/eviction_policy.h) of the mem:// tier, all preallocated (in lazily committed mappings) so that
// storing or finding a chunk never calls malloc. Under policy=lru only the window list is used.
//
// Thread-safety: none; the tier's mutex guards every call. Entries are addressed by a 32-bit index.
#pragma once

#include <cstdint>

#include "core/eviction_policy.h"
#include "kvtier/tier.h"
#include "tiers/mem/page_arena.h"

namespace kvtier::internal {

enum class EntryState : uint8_t {
  kFree = 0,  // in the pool
  kWriting,   // pages reserved, bytes being copied in; not visible
  kLive,      // in the hash table and a recency list
  kDead,      // removed while readers still copy out; freed by the last reader
};

struct MemEntry {
  ChunkId id;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // xxh3 of the payload; only kept when the tier verifies
  uint32_t first_page = 0, last_page = 0, pages = 0;
  uint64_t last_use = 0;        // the index's clock at the last Insert, Touch or Promote
  uint32_t prev = 0, next = 0;  // list neighbours (kLive), or the pool's free list (kFree)
  uint32_t pins = 0;            // readers copying out; pages are not reused while pinned
  EntryState state = EntryState::kFree;
  EvictionList segment = EvictionList::kWindow;  // the recency list of a live entry
};

class ChunkIndex {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // Reserves room for `max_entries` chunks. IOError when the mappings cannot be made.
  Status Init(uint32_t max_entries);

  MemEntry& at(uint32_t e) { return entries_[e]; }
  const MemEntry& at(uint32_t e) const { return entries_[e]; }
  uint32_t live() const { return live_; }

  // The live entry named by (namespace, key), or kNone.
  uint32_t Find(const ChunkId& id) const;

  // A free entry, or kNone when the pool is exhausted (the caller evicts and retries).
  uint32_t AllocEntry();
  void FreeEntry(uint32_t e);

  // Makes an entry live: into the hash table and at the front (most recent) of list `seg`.
  void Insert(uint32_t e, EvictionList seg);
  // Takes a live entry out of the hash table and its list; its state is left to the caller.
  void Erase(uint32_t e);
  void Touch(uint32_t e);    // moves a live entry to the front of its list
  void Promote(uint32_t e);  // moves a live window entry to the front of main

  uint32_t head(EvictionList seg) const { return head_[Idx(seg)]; }  // most recent, or kNone
  uint32_t tail(EvictionList seg) const { return tail_[Idx(seg)]; }  // least recent, or kNone
  uint64_t pages(EvictionList seg) const { return pages_[Idx(seg)]; }  // pages of the list's entries
  // Ticks since the least recent entry of `seg` was used (0 when the list is empty).
  uint64_t TailAge(EvictionList seg) const;

 private:
  size_t SlotOf(const ChunkId& id) const;
  size_t FindSlot(const ChunkId& id) const;  // slot holding id, or an empty one
  static size_t Idx(EvictionList seg) { return static_cast<size_t>(seg); }
  void Unlink(uint32_t e);
  void PushFront(uint32_t e, EvictionList seg);

  MappedRegion entry_region_, table_region_;
  MemEntry* entries_ = nullptr;
  uint32_t* table_ = nullptr;  // open addressing with linear probing; entry + 1, 0 = empty
  size_t mask_ = 0;
  uint32_t max_entries_ = 0;
  uint32_t high_water_ = 0;  // entries at or above it were never used
  uint32_t free_head_ = kNone;
  uint32_t live_ = 0;
  uint32_t head_[2] = {kNone, kNone}, tail_[2] = {kNone, kNone};
  uint64_t pages_[2] = {0, 0};
  uint64_t clock_ = 0;
};

}  // namespace kvtier::internal
