#include "tiers/file/file_index.h"

namespace kvtier::internal {

IndexEntry* FileIndex::Find(const IndexKey& key) {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second.entry;
}

IndexEntry* FileIndex::Touch(const IndexKey& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second.entry;
}

const IndexEntry& FileIndex::Insert(const IndexKey& key, IndexEntry entry) {
  entry.generation = next_generation_++;
  lru_.push_front(key);
  Slot& slot = map_[key];
  slot.entry = entry;
  slot.lru = lru_.begin();
  stored_ += entry.stored_bytes;
  return slot.entry;
}

bool FileIndex::Erase(const IndexKey& key, uint64_t generation) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  if (generation != 0 && it->second.entry.generation != generation) return false;
  stored_ -= it->second.entry.stored_bytes;
  lru_.erase(it->second.lru);
  map_.erase(it);
  return true;
}

void FileIndex::PopLru(std::vector<IndexKey>* victims) {
  const IndexKey key = lru_.back();
  victims->push_back(key);
  Erase(key);
}

bool FileIndex::MakeRoom(uint64_t need, std::vector<IndexKey>* victims, uint64_t* victim_bytes) {
  if (reserved_ + unlinking_ + need > capacity_) return false;
  const uint64_t before = stored_;
  while (usage() + need > capacity_) PopLru(victims);  // lru_ is not empty: stored_ > 0 here
  unlinking_ += before - stored_;
  *victim_bytes += before - stored_;
  return true;
}

void FileIndex::TrimToCapacity(std::vector<IndexKey>* victims) {
  while (stored_ > 0 && usage() > capacity_) PopLru(victims);
}

std::vector<ChunkInfo> FileIndex::Snapshot() const {
  std::vector<ChunkInfo> out;
  out.reserve(map_.size());
  for (const IndexKey& key : lru_) {
    const IndexEntry& e = map_.at(key).entry;
    ChunkInfo info;
    info.id.ns = key.ns;
    info.id.key = key.key;
    info.id.layout_fingerprint = e.layout_fingerprint;
    info.stored_bytes = e.stored_bytes;
    out.push_back(info);
  }
  return out;
}

}  // namespace kvtier::internal
