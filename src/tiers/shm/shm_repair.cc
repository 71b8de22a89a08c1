// ShmPool's repair: every derived structure (page bitmap, index, usage and live counts, per-slot pin
// counts) rebuilt from the slots and pin records, the pool's only source of truth, and the cheap checks
// that decide when a rebuild is due. A same-uid process may have scribbled anything shared, so every
// walk here is bounded by the geometry and every slot or page number is range-checked.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "tiers/shm/shm_pool.h"

namespace kvtier::internal::shm {
// Who claims each page while chains are rebuilt, and which slots' chunks were checked.
struct RepairClaims {
  std::vector<uint32_t> owner;                // page -> slot, kNone when unclaimed
  std::unordered_map<uint32_t, bool> intact;  // slot -> its chunk reads back whole (asked once)
};

bool ShmPool::NeedsRoomLocked(uint64_t pages) const {
  const uint64_t limit = hdr_->capacity_bytes.load(std::memory_order_relaxed) / hdr_->page_bytes;
  return hdr_->used_pages.load(std::memory_order_relaxed) + pages > limit;
}

bool ShmPool::UsedPagesMatchBitmapLocked() const {
  const uint64_t total = hdr_->page_count, words = (total + 63) / 64;
  uint64_t set = 0;
  for (uint64_t w = 0; w < words; ++w) {
    uint64_t bits = bitmap_[w].load(std::memory_order_relaxed);
    if (w == words - 1 && total % 64 != 0) bits &= (uint64_t{1} << (total % 64)) - 1;  // past the last page
    set += static_cast<uint64_t>(__builtin_popcountll(bits));
  }
  return set == hdr_->used_pages.load(std::memory_order_relaxed);
}

bool ShmPool::CountersAgreeLocked() const {
  uint64_t used = 0, live = 0;
  for (uint64_t i = 0; i < hdr_->slot_count; ++i) {
    const Slot& x = slots_[i];
    const uint64_t st = StateOf(x.word.load(std::memory_order_relaxed));
    if (st == kFree) continue;
    used += x.pages.load(std::memory_order_relaxed) >> 32;
    live += st == kPublished ? 1 : 0;
  }
  return used == hdr_->used_pages.load(std::memory_order_relaxed) &&
         live == hdr_->live_chunks.load(std::memory_order_relaxed) && UsedPagesMatchBitmapLocked();
}

void ShmPool::CheckCountersLocked() {
  if (!CountersPlausibleLocked() || !CountersAgreeLocked()) RepairLocked();
}

void ShmPool::ReleaseChainLocked(uint32_t s, RepairClaims& c) const {
  const uint64_t pg = slots_[s].pages.load(std::memory_order_relaxed), total = hdr_->page_count;
  uint32_t p = static_cast<uint32_t>(pg);
  for (uint64_t k = 0; k < std::min(pg >> 32, total) && p < total; ++k) {
    if (c.owner[p] == s) c.owner[p] = kNone;
    p = next_[p].load(std::memory_order_relaxed);
  }
}

bool ShmPool::IntactLocked(uint32_t s, RepairClaims& c) const {
  const uint64_t st = StateOf(slots_[s].word.load(std::memory_order_relaxed));
  if (!chain_check_ || (st != kPublished && st != kDead)) return false;  // a reservation has no sums yet
  auto it = c.intact.find(s);
  if (it == c.intact.end()) it = c.intact.emplace(s, chain_check_(s)).first;
  return it->second;
}

bool ShmPool::ClaimChainLocked(uint32_t s, RepairClaims& c) {
  const uint64_t total = hdr_->page_count, pg = slots_[s].pages.load(std::memory_order_relaxed), n = pg >> 32;
  if (StateOf(slots_[s].word.load(std::memory_order_relaxed)) > kDead || n > total) return false;
  uint32_t p = static_cast<uint32_t>(pg);
  for (uint64_t k = 0; k < n; ++k) {
    const uint32_t o = p < total ? c.owner[p] : s;  // leaving the arena or meeting itself: dropped
    if (o == s) {
      ReleaseChainLocked(s, c);
      return false;
    }
    if (o != kNone) {
      // Two chains share a page: at most one is what its writer made. Keep the one whose chunk
      // verifies when only one does; else the earlier claimant (neither can be told intact).
      if (!IntactLocked(s, c) || IntactLocked(o, c)) {
        ReleaseChainLocked(s, c);
        return false;
      }
      ReleaseChainLocked(o, c);
      Slot& y = slots_[o];
      y.word.store(MakeWord(GenOf(y.word.load(std::memory_order_relaxed)) + 1, kFree), std::memory_order_release);
    }
    c.owner[p] = s;
    p = next_[p].load(std::memory_order_relaxed);
  }
  return true;
}

void ShmPool::RebuildPinCountsLocked() {
  const uint64_t slots = hdr_->slot_count;
  // Counts per slot from the records (a dead holder may have died between the two updates).
  for (uint64_t i = 0; i < slots; ++i) slots_[i].pins.store(0, std::memory_order_relaxed);
  for (uint64_t i = 0; i < hdr_->pin_count; ++i) {
    PinRecord& r = pins_[i];
    const uint32_t cnt = r.count.load(std::memory_order_relaxed), s = r.slot.load(std::memory_order_relaxed);
    if (cnt == 0) continue;
    if (s >= slots) {
      r.count.store(0, std::memory_order_relaxed);
      continue;
    }
    slots_[s].pins.fetch_add(cnt, std::memory_order_relaxed);
  }
}

void ShmPool::RepairLocked() {
  const uint64_t slots = hdr_->slot_count, total = hdr_->page_count;
  RebuildPinCountsLocked();
  // Pages: each slot's chain claims its pages; a chain that leaves the arena or loops is dropped, and
  // of two that meet, the one whose chunk verifies is kept (ClaimChainLocked). Each slot is dropped at
  // most once, so the pass is bounded by slots x pages.
  RepairClaims c;
  c.owner.assign(total, kNone);
  for (uint64_t i = 0; i < slots; ++i) {
    Slot& x = slots_[i];
    const uint64_t w = x.word.load(std::memory_order_relaxed);
    if (StateOf(w) == kFree || ClaimChainLocked(static_cast<uint32_t>(i), c)) continue;
    x.word.store(MakeWord(GenOf(w) + 1, kFree), std::memory_order_release);
  }
  for (uint64_t w = 0; w < (total + 63) / 64; ++w) bitmap_[w].store(0, std::memory_order_relaxed);
  for (uint64_t p = 0; p < total; ++p) {
    if (c.owner[p] != kNone) bitmap_[p / 64].fetch_or(uint64_t{1} << (p % 64), std::memory_order_relaxed);
  }
  // Index and counts, from the slots that kept their chains.
  for (uint64_t i = 0; i < hdr_->index_size; ++i) index_[i].store(kNone, std::memory_order_relaxed);
  uint64_t used = 0, live = 0;
  for (uint64_t i = 0; i < slots; ++i) {
    Slot& x = slots_[i];
    const uint64_t w = x.word.load(std::memory_order_relaxed);
    if (StateOf(w) == kFree) continue;
    used += x.pages.load(std::memory_order_relaxed) >> 32;
    if (StateOf(w) != kPublished) continue;
    if (FindLocked(IdOf(x)) != kNone) {  // never made by PublishLocked; kept once all the same
      x.word.store(MakeWord(GenOf(w), kDead), std::memory_order_release);
    } else {
      (void)IndexInsertLocked(static_cast<uint32_t>(i));  // cleared above, twice the slots: never full
      ++live;
    }
  }
  hdr_->used_pages.store(used, std::memory_order_relaxed);
  hdr_->live_chunks.store(live, std::memory_order_relaxed);
  hdr_->repairs.fetch_add(1, std::memory_order_relaxed);
  // Reservations and pins of the dead; a kDead slot nobody pins any more.
  ReclaimDeadLocked();
  for (uint64_t i = 0; i < slots; ++i) {
    if (StateOf(slots_[i].word.load(std::memory_order_relaxed)) == kDead && slots_[i].pins.load(std::memory_order_relaxed) == 0) {
      FreeLocked(static_cast<uint32_t>(i));
    }
  }
}

}  // namespace kvtier::internal::shm
