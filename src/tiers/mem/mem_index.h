// ChunkIndex: the entry pool, hash table and LRU list of the mem:// tier, all preallocated (in lazily
// committed mappings) so that storing or finding a chunk never calls malloc.
//
// Thread-safety: none; the tier's mutex guards every call. Entries are addressed by a 32-bit index.
#pragma once

#include <cstdint>

#include "kvtier/tier.h"
#include "tiers/mem/page_arena.h"

namespace kvtier::internal {

enum class EntryState : uint8_t {
  kFree = 0,  // in the pool
  kWriting,   // pages reserved, bytes being copied in; not visible
  kLive,      // in the hash table and the LRU list
  kDead,      // removed while readers still copy out; freed by the last reader
};

struct MemEntry {
  ChunkId id;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // xxh3 of the payload; only kept when the tier verifies
  uint32_t first_page = 0, last_page = 0, pages = 0;
  uint32_t prev = 0, next = 0;  // LRU neighbours (kLive), or the pool's free list (kFree)
  uint32_t pins = 0;            // readers copying out; pages are not reused while pinned
  EntryState state = EntryState::kFree;
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

  // Makes an entry live: into the hash table and at the front (most recent) of the LRU list.
  void Insert(uint32_t e);
  // Takes a live entry out of the hash table and the LRU list; its state is left to the caller.
  void Erase(uint32_t e);
  void Touch(uint32_t e);  // moves a live entry to the LRU front

  uint32_t lru_head() const { return head_; }  // most recent, or kNone
  uint32_t lru_tail() const { return tail_; }  // least recent, or kNone

 private:
  size_t SlotOf(const ChunkId& id) const;
  size_t FindSlot(const ChunkId& id) const;  // slot holding id, or an empty one
  void UnlinkLru(uint32_t e);
  void PushFront(uint32_t e);

  MappedRegion entry_region_, table_region_;
  MemEntry* entries_ = nullptr;
  uint32_t* table_ = nullptr;  // open addressing with linear probing; entry + 1, 0 = empty
  size_t mask_ = 0;
  uint32_t max_entries_ = 0;
  uint32_t high_water_ = 0;  // entries at or above it were never used
  uint32_t free_head_ = kNone;
  uint32_t live_ = 0;
  uint32_t head_ = kNone, tail_ = kNone;
};

}  // namespace kvtier::internal
