#include "core/eviction_policy.h"

#include <algorithm>
#include <cstring>

namespace kvtier::internal {
namespace {

constexpr int kProbes = 3;
constexpr uint64_t kBitsPerKey = 16;

uint64_t Probe(const ChunkKey& key, int i, uint64_t bits) {
  uint64_t v;
  std::memcpy(&v, key.bytes.data() + 8 * i, sizeof(v));  // the key is a SHA-256 digest: uniform
  return v % bits;
}

}  // namespace

Result<EvictionPolicy> ParseEvictionPolicy(const std::string& name) {
  if (name == "lru") return EvictionPolicy::kLru;
  if (name == "window") return EvictionPolicy::kWindow;
  return Status::InvalidArgument("policy must be 'lru' (the default) or 'window', got '" + name + "'");
}

Result<EvictionPolicy> EvictionPolicyOf(const TierUrl& url) {
  auto it = url.params.find("policy");
  if (it == url.params.end()) return EvictionPolicy::kLru;
  return ParseEvictionPolicy(it->second);
}

const char* EvictionPolicyName(EvictionPolicy p) { return p == EvictionPolicy::kLru ? "lru" : "window"; }

EvictionList SegmentToEvict(EvictionPolicy p, const SegmentState& s) {
  if (p == EvictionPolicy::kLru || s.main_used == 0) return EvictionList::kWindow;
  if (s.window_used == 0) return EvictionList::kMain;
  const uint64_t share = std::max<uint64_t>(1, s.capacity / kWindowShareDivisor);
  if (s.window_used <= share) return EvictionList::kMain;
  // Main's least recent chunk has gone stale: it was used longer ago than many window lifetimes.
  if (s.main_tail_age / kStaleFactor > s.window_tail_age) return EvictionList::kMain;
  return EvictionList::kWindow;
}

void GhostFilter::Init(uint64_t capacity_chunks) {
  turnover_ = capacity_chunks * kGhostFactor / 2;
  bits_ = std::max<uint64_t>(64, turnover_ * kBitsPerKey);
  const size_t words = (bits_ + 63) / 64;
  bits_ = words * 64;
  current_.assign(words, 0);
  previous_.assign(words, 0);
  added_ = 0;
}

void GhostFilter::Add(const ChunkKey& key) {
  if (turnover_ == 0) return;
  if (added_ >= turnover_) {
    current_.swap(previous_);
    std::fill(current_.begin(), current_.end(), 0);
    added_ = 0;
  }
  for (int i = 0; i < kProbes; ++i) {
    const uint64_t b = Probe(key, i, bits_);
    current_[b / 64] |= uint64_t{1} << (b % 64);
  }
  ++added_;
}

bool GhostFilter::Test(const std::vector<uint64_t>& bits, const ChunkKey& key) const {
  for (int i = 0; i < kProbes; ++i) {
    const uint64_t b = Probe(key, i, bits_);
    if ((bits[b / 64] >> (b % 64) & 1) == 0) return false;
  }
  return true;
}

bool GhostFilter::Contains(const ChunkKey& key) const {
  return turnover_ != 0 && (Test(current_, key) || Test(previous_, key));
}

}  // namespace kvtier::internal
