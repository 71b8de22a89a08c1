#include "tiers/mem/mem_index.h"

#include <bit>
#include <cstring>
#include <type_traits>

namespace kvtier::internal {
namespace {

bool SameChunk(const ChunkId& a, const ChunkId& b) { return a.key == b.key && a.ns == b.ns; }

}  // namespace

// The pool and table live in zero-filled mappings, so an all-zero MemEntry must be a valid free one.
static_assert(std::is_trivially_copyable_v<MemEntry>);
static_assert(static_cast<int>(EntryState::kFree) == 0);
static_assert(static_cast<int>(EvictionList::kWindow) == 0);

Status ChunkIndex::Init(uint32_t max_entries) {
  max_entries_ = max_entries;
  // At most half full, so linear probes stay short.
  const size_t slots = std::bit_ceil(static_cast<size_t>(max_entries) * 2);
  mask_ = slots - 1;
  KVTIER_ASSIGN_OR_RETURN(entry_region_, MappedRegion::Map(sizeof(MemEntry) * max_entries));
  KVTIER_ASSIGN_OR_RETURN(table_region_, MappedRegion::Map(sizeof(uint32_t) * slots));
  entries_ = reinterpret_cast<MemEntry*>(entry_region_.data());
  table_ = reinterpret_cast<uint32_t*>(table_region_.data());
  return Status::OK();
}

size_t ChunkIndex::SlotOf(const ChunkId& id) const {
  // Keys are SHA-256 digests, already uniform; mixing in the namespace keeps equal keys of different
  // namespaces (which cannot occur by construction, but costs nothing) apart.
  uint64_t k, n;
  std::memcpy(&k, id.key.bytes.data(), sizeof(k));
  std::memcpy(&n, id.ns.data(), sizeof(n));
  return static_cast<size_t>(k ^ (n * 0x9E3779B97F4A7C15ull)) & mask_;
}

size_t ChunkIndex::FindSlot(const ChunkId& id) const {
  size_t s = SlotOf(id);
  while (table_[s] != 0 && !SameChunk(entries_[table_[s] - 1].id, id)) s = (s + 1) & mask_;
  return s;
}

uint32_t ChunkIndex::Find(const ChunkId& id) const {
  const uint32_t v = table_[FindSlot(id)];
  return v == 0 ? kNone : v - 1;
}

uint32_t ChunkIndex::AllocEntry() {
  uint32_t e;
  if (free_head_ != kNone) {
    e = free_head_;
    free_head_ = entries_[e].next;
  } else if (high_water_ < max_entries_) {
    e = high_water_++;
  } else {
    return kNone;
  }
  entries_[e] = MemEntry{};
  return e;
}

void ChunkIndex::FreeEntry(uint32_t e) {
  entries_[e].state = EntryState::kFree;
  entries_[e].next = free_head_;
  free_head_ = e;
}

void ChunkIndex::Insert(uint32_t e, EvictionList seg) {
  table_[FindSlot(entries_[e].id)] = e + 1;
  entries_[e].state = EntryState::kLive;
  PushFront(e, seg);
  ++live_;
}

void ChunkIndex::Erase(uint32_t e) {
  // Backward-shift deletion: no tombstones, so probe lengths never degrade under churn.
  size_t hole = FindSlot(entries_[e].id);
  table_[hole] = 0;
  for (size_t s = (hole + 1) & mask_; table_[s] != 0; s = (s + 1) & mask_) {
    const size_t home = SlotOf(entries_[table_[s] - 1].id);
    // Move the entry into the hole unless its home lies cyclically in (hole, s].
    const bool stays = hole <= s ? (hole < home && home <= s) : (hole < home || home <= s);
    if (!stays) {
      table_[hole] = table_[s];
      table_[s] = 0;
      hole = s;
    }
  }
  Unlink(e);
  --live_;
}

void ChunkIndex::Touch(uint32_t e) {
  const EvictionList seg = entries_[e].segment;
  Unlink(e);
  PushFront(e, seg);
}

void ChunkIndex::Promote(uint32_t e) {
  Unlink(e);
  PushFront(e, EvictionList::kMain);
}

uint64_t ChunkIndex::TailAge(EvictionList seg) const {
  const uint32_t t = tail_[Idx(seg)];
  return t == kNone ? 0 : clock_ - entries_[t].last_use;
}

void ChunkIndex::Unlink(uint32_t e) {
  MemEntry& x = entries_[e];
  const size_t s = Idx(x.segment);
  if (x.prev != kNone) entries_[x.prev].next = x.next; else head_[s] = x.next;
  if (x.next != kNone) entries_[x.next].prev = x.prev; else tail_[s] = x.prev;
  x.prev = x.next = kNone;
  pages_[s] -= x.pages;
}

void ChunkIndex::PushFront(uint32_t e, EvictionList seg) {
  MemEntry& x = entries_[e];
  const size_t s = Idx(seg);
  x.segment = seg;
  x.last_use = ++clock_;
  x.prev = kNone;
  x.next = head_[s];
  if (head_[s] != kNone) entries_[head_[s]].prev = e;
  head_[s] = e;
  if (tail_[s] == kNone) tail_[s] = e;
  pages_[s] += x.pages;
}

}  // namespace kvtier::internal
