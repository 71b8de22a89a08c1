// TtlKeySet: remembers chunk keys for a short, fixed time, with a bound on how many it holds.
//
// The fs:// tier uses one as its negative-lookup cache (a key found missing is not stat'ed again for
// `ttl`, so a miss-heavy Lookup stays cheap), one as its positive-lookup cache, and one to rate-limit
// recency touches. Forgetting early is
// always safe (the filesystem is asked again), so when full the oldest entries are dropped.
//
// Thread-safety: every method may be called from many threads at once (sharded mutexes).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>

#include "core/thread_annotations.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

class TtlKeySet {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `ttl` zero disables the set: Contains is always false. `max_entries` is the bound (at least one
  // per shard). `clock` defaults to steady_clock::now (tests inject their own).
  TtlKeySet(std::chrono::milliseconds ttl, size_t max_entries, Clock clock = nullptr);

  // True while `id` was inserted less than ttl ago and not erased since.
  bool Contains(const ChunkId& id);
  // Inserts (or refreshes) `id`.
  void Insert(const ChunkId& id);
  void Erase(const ChunkId& id);
  // Forgets every entry.
  void Clear();
  // Entries held now, expired ones included until they are swept.
  size_t size() const;

 private:
  struct Key {
    Digest ns;
    Digest key;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Shard {
    mutable Mutex mu;
    std::unordered_map<Key, TimePoint, KeyHash> expiry GUARDED_BY(mu);
    std::deque<std::pair<Key, TimePoint>> order GUARDED_BY(mu);  // insertion order; may hold stale entries
  };
  static constexpr size_t kShards = 16;

  static Key KeyOf(const ChunkId& id);
  Shard& ShardOf(const Key& k);
  // Drops expired entries and, while over the bound, the oldest ones.
  void Sweep(Shard& shard, TimePoint now) REQUIRES(shard.mu);
  TimePoint Now() const;

  const std::chrono::milliseconds ttl_;
  const size_t max_per_shard_;
  const Clock clock_;
  std::array<Shard, kShards> shards_;
};

}  // namespace kvtier::internal
