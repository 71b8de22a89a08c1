// The eviction and admission policy kvtier's tiers share (issue 38; docs/replay.md "Eviction policy").
//
// KV traffic is a mix of prefixes that come back (session histories, shared system prompts, documents)
// and long prompts read once. Plain LRU lets one flood of one-shot prompts push out the whole working
// set. The `window` policy (`policy=window`; the default is still `lru`, see docs/replay.md for why)
// splits a tier in two recency lists:
//   - the window, a small share of capacity (kWindowShare), takes chunks seen for the first time;
//   - the main list takes chunks referenced again while in the window, and chunks evicted recently
//     that come back (found in the ghost filter below): what traffic has shown to return.
// The tier evicts from the window while the window holds more than its share (or main is empty),
// else from main: a flood of first-seen chunks only cycles through the window. So that main does
// not keep what has gone cold for good, its least recent chunk goes first when it is more than
// kStaleFactor times older than the window's least recent one.
//
// The ghost filter remembers evicted chunk keys, not their bytes: two Bloom filters that take turns,
// each covering ghost_factor/2 x capacity evictions, so a key is remembered for between that many and
// twice that many evictions; false positives (about 1% at 16 bits a key and 3 probes) only admit a
// first-seen chunk to main. Keys are SHA-256 digests, so the probes are slices of the key.
//
// Every call is O(1). The tiers keep their own lists (mem://: linked entries); this file holds what
// they decide with, so `kvtier replay` (which drives the real tiers) measures exactly this code.
//
// Thread-safety: none; the tier's lock guards every call.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

enum class EvictionPolicy : uint8_t {
  kLru,     // one recency list: what every tier did before issue 38
  kWindow,  // window + main + ghost, above
};

// "lru" or "window"; InvalidArgument for anything else, naming the choices.
Result<EvictionPolicy> ParseEvictionPolicy(const std::string& name);
// The `policy=` URL option of a tier (default: lru).
Result<EvictionPolicy> EvictionPolicyOf(const TierUrl& url);
const char* EvictionPolicyName(EvictionPolicy p);

inline constexpr uint32_t kWindowShareDivisor = 50;  // the window: 2% of capacity, at least one unit
inline constexpr uint32_t kStaleFactor = 16;
inline constexpr uint32_t kGhostFactor = 8;

enum class EvictionList : uint8_t { kWindow = 0, kMain = 1 };

// Where a chunk that is not cached goes when it is stored.
inline EvictionList SegmentForNewChunk(EvictionPolicy p, bool in_ghost) {
  return p == EvictionPolicy::kWindow && in_ghost ? EvictionList::kMain : EvictionList::kWindow;
}

// What the tier knows when it must evict: how much each list holds (in the tier's unit: pages,
// slots or bytes), the capacity in that unit, and the ages (ticks since last use, in the tier's own
// logical clock) of each list's least recent chunk.
struct SegmentState {
  uint64_t window_used = 0, main_used = 0, capacity = 0;
  uint64_t window_tail_age = 0, main_tail_age = 0;
};

// The list to evict from. Under kLru everything lives in the window list, so the answer is kWindow.
EvictionList SegmentToEvict(EvictionPolicy p, const SegmentState& s);

// The ghost filter. Sized once for `capacity_chunks`; Add and Contains are O(1) and never allocate.
class GhostFilter {
 public:
  // Sizes the two filters; capacity_chunks 0 makes a filter that remembers nothing.
  void Init(uint64_t capacity_chunks);
  void Add(const ChunkKey& key);
  bool Contains(const ChunkKey& key) const;

 private:
  bool Test(const std::vector<uint64_t>& bits, const ChunkKey& key) const;
  std::vector<uint64_t> current_, previous_;
  uint64_t bits_ = 0;     // per filter
  uint64_t added_ = 0;    // to current_
  uint64_t turnover_ = 0; // keys per filter before they take turns
};

}  // namespace kvtier::internal
