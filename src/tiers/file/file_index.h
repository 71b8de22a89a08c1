// The in-memory index of a file:// tier: which chunks are on disk, their stored sizes, and their LRU
// order, plus bytes reserved by writes in progress. Holds no I/O. Not thread-safe: FileTier guards it
// with its mutex.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "kvtier/tier.h"

namespace kvtier::internal {

struct IndexKey {
  Digest ns{};
  ChunkKey key{};
  bool operator==(const IndexKey&) const = default;
  static IndexKey Of(const ChunkId& id) { return {id.ns, id.key}; }
};

struct IndexKeyHash {
  size_t operator()(const IndexKey& k) const { return ChunkKeyHash()(k.key) ^ (k.ns[0] * 0x9E3779B97F4A7C15ull); }
};

struct IndexEntry {
  uint64_t stored_bytes = 0;
  uint64_t layout_fingerprint = 0;  // 0 when found by a scan (the header was not read)
  uint64_t generation = 0;          // distinguishes a re-stored chunk from the one a reader looked up
  int64_t mtime_touched_s = 0;      // when the file's mtime was last refreshed (seconds)
};

class FileIndex {
 public:
  explicit FileIndex(uint64_t capacity) : capacity_(capacity) {}

  // The entry, or nullptr. Touch also makes it the most recently used.
  IndexEntry* Find(const IndexKey& key);
  IndexEntry* Touch(const IndexKey& key);
  // Adds as most recently used; the entry's generation is assigned here. REQUIRES: key absent.
  const IndexEntry& Insert(const IndexKey& key, IndexEntry entry);
  // Removes; false when absent, or present with another generation (when `generation` != 0).
  bool Erase(const IndexKey& key, uint64_t generation = 0);

  // Picks least recently used chunks, removing them from the index, until `need` more bytes fit under
  // the capacity next to what is stored, reserved and still being unlinked. The victims' bytes are
  // added to *victim_bytes and stay counted (as unlinking) until the caller has unlinked their files
  // and calls Unlinked: so usage() counts what is on disk, and no other writer takes the room before
  // the files are gone. False (and nothing removed) when reservations and pending unlinks leave no
  // room.
  bool MakeRoom(uint64_t need, std::vector<IndexKey>* victims, uint64_t* victim_bytes);
  // Bytes of files taken out of the index and not yet unlinked (see MakeRoom).
  void Unlinking(uint64_t n) { unlinking_ += n; }
  void Unlinked(uint64_t n) { unlinking_ -= n; }
  uint64_t unlinking() const { return unlinking_; }
  // Removes least recently used chunks until usage <= capacity (after a restart with a smaller one).
  void TrimToCapacity(std::vector<IndexKey>* victims);

  void Reserve(uint64_t n) { reserved_ += n; }
  void Unreserve(uint64_t n) { reserved_ -= n; }

  uint64_t capacity() const { return capacity_; }
  uint64_t stored_bytes() const { return stored_; }
  uint64_t usage() const { return stored_ + reserved_ + unlinking_; }
  size_t size() const { return map_.size(); }
  // Every chunk, most recently used first.
  std::vector<ChunkInfo> Snapshot() const;

 private:
  struct Slot {
    IndexEntry entry;
    std::list<IndexKey>::iterator lru;
  };
  void PopLru(std::vector<IndexKey>* victims);

  const uint64_t capacity_;
  std::unordered_map<IndexKey, Slot, IndexKeyHash> map_;
  std::list<IndexKey> lru_;  // front = most recently used
  uint64_t stored_ = 0;
  uint64_t reserved_ = 0;
  uint64_t unlinking_ = 0;
  uint64_t next_generation_ = 1;
};

}  // namespace kvtier::internal
