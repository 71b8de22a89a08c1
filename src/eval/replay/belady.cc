#include "eval/replay/belady.h"

#include <limits>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "eval/replay/trace_stats.h"

namespace kvtier::internal {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

// next[p]: position of the next reference to the block referenced at position p, or kNever.
std::vector<uint64_t> NextUses(const Trace& trace) {
  std::vector<uint32_t> refs;
  refs.reserve(trace.block_refs);
  for (const TraceRequest& r : trace.requests) refs.insert(refs.end(), r.hash_ids.begin(), r.hash_ids.end());
  std::vector<uint64_t> next(refs.size(), kNever);
  std::unordered_map<uint32_t, uint64_t> later;
  later.reserve(refs.size());
  for (size_t p = refs.size(); p-- > 0;) {
    auto [it, fresh] = later.try_emplace(refs[p], p);
    if (!fresh) {
      next[p] = it->second;
      it->second = p;
    }
  }
  return next;
}

// The cache: block -> its next use, and a max-heap of (next use, block) with stale entries skipped.
class MinCache {
 public:
  explicit MinCache(uint64_t capacity) : capacity_(capacity) {}

  bool Has(uint32_t block) const { return next_.contains(block); }

  // A reference to `block` whose next use is `next`.
  void Reference(uint32_t block, uint64_t next) {
    auto it = next_.find(block);
    if (it != next_.end()) {
      it->second = next;
      heap_.emplace(next, block);
      return;
    }
    if (capacity_ != 0 && next_.size() >= capacity_) {
      DropStale();
      if (next >= heap_.top().first) return;  // bypass: the newcomer is needed last
      next_.erase(heap_.top().second);
      heap_.pop();
    }
    next_.emplace(block, next);
    heap_.emplace(next, block);
  }

 private:
  void DropStale() {
    while (true) {
      const auto [n, b] = heap_.top();
      auto it = next_.find(b);
      if (it != next_.end() && it->second == n) return;
      heap_.pop();
    }
  }

  uint64_t capacity_;
  std::unordered_map<uint32_t, uint64_t> next_;
  std::priority_queue<std::pair<uint64_t, uint32_t>> heap_;
};

}  // namespace

BeladyResult Belady(const Trace& trace, uint64_t capacity_blocks) {
  const std::vector<uint64_t> next = NextUses(trace);
  MinCache cache(capacity_blocks);
  BeladyResult out;
  out.capacity_blocks = capacity_blocks;
  uint64_t p = 0;
  for (const TraceRequest& r : trace.requests) {
    out.input_tokens += r.input_length;
    size_t lead = 0;
    while (lead < r.hash_ids.size() && cache.Has(r.hash_ids[lead])) ++lead;
    out.hit_blocks += lead;
    out.hit_tokens += HitTokens(r, lead, trace.block_tokens);
    for (uint32_t id : r.hash_ids) {
      if (cache.Has(id)) ++out.resident_refs;
      cache.Reference(id, next[p++]);
    }
  }
  return out;
}

}  // namespace kvtier::internal
