#include "tiers/fs/ttl_key_set.h"

#include <algorithm>
#include <cstring>

namespace kvtier::internal {

size_t TtlKeySet::KeyHash::operator()(const Key& k) const {
  uint64_t a, b;
  std::memcpy(&a, k.key.data(), sizeof(a));  // keys are uniform hashes already
  std::memcpy(&b, k.ns.data(), sizeof(b));
  return static_cast<size_t>(a ^ (b * 0x9E3779B97F4A7C15ull));
}

TtlKeySet::TtlKeySet(std::chrono::milliseconds ttl, size_t max_entries, Clock clock)
    : ttl_(ttl), max_per_shard_(std::max<size_t>(1, max_entries / kShards)), clock_(std::move(clock)) {}

TtlKeySet::Key TtlKeySet::KeyOf(const ChunkId& id) { return Key{id.ns, id.key.bytes}; }

TtlKeySet::Shard& TtlKeySet::ShardOf(const Key& k) {
  // Bytes 8.. of the key, so the shard choice is independent of the map's hash.
  return shards_[static_cast<size_t>(k.key[8]) % kShards];
}

TtlKeySet::TimePoint TtlKeySet::Now() const {
  return clock_ ? clock_() : std::chrono::steady_clock::now();
}

bool TtlKeySet::Contains(const ChunkId& id) {
  if (ttl_.count() <= 0) return false;
  const Key k = KeyOf(id);
  Shard& s = ShardOf(k);
  MutexLock lock(s.mu);
  auto it = s.expiry.find(k);
  if (it == s.expiry.end()) return false;
  if (it->second <= Now()) {
    s.expiry.erase(it);
    return false;
  }
  return true;
}

void TtlKeySet::Insert(const ChunkId& id) {
  if (ttl_.count() <= 0) return;
  const Key k = KeyOf(id);
  Shard& s = ShardOf(k);
  const TimePoint now = Now();
  const TimePoint expires = now + ttl_;
  MutexLock lock(s.mu);
  s.expiry[k] = expires;
  s.order.emplace_back(k, expires);
  Sweep(s, now);
}

void TtlKeySet::Erase(const ChunkId& id) {
  const Key k = KeyOf(id);
  Shard& s = ShardOf(k);
  MutexLock lock(s.mu);
  s.expiry.erase(k);  // its entry in `order` becomes stale and is dropped by a later sweep
}

void TtlKeySet::Clear() {
  for (Shard& s : shards_) {
    MutexLock lock(s.mu);
    s.expiry.clear();
    s.order.clear();
  }
}

void TtlKeySet::Sweep(Shard& s, TimePoint now) {
  // The ttl is fixed, so insertion order is expiry order: the front is always the oldest.
  while (!s.order.empty()) {
    const auto& [k, expires] = s.order.front();
    auto it = s.expiry.find(k);
    const bool current = it != s.expiry.end() && it->second == expires;
    const bool over = s.expiry.size() > max_per_shard_ || s.order.size() > 2 * max_per_shard_;
    if (current && expires > now && !over) break;
    if (current) s.expiry.erase(it);
    s.order.pop_front();
  }
}

size_t TtlKeySet::size() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    MutexLock lock(s.mu);
    n += s.expiry.size();
  }
  return n;
}

}  // namespace kvtier::internal
