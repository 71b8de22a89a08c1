#include "tiers/object/object_index.h"

namespace kvtier::object {

Result<std::vector<std::string>> ObjectIndex::Add(const std::string& name, uint64_t bytes, bool* added) {
  if (capacity_ != 0 && bytes > capacity_) {
    return Status::NoSpace("a chunk object of " + std::to_string(bytes) + " bytes exceeds the capacity of " +
                           std::to_string(capacity_));
  }
  internal::MutexLock lock(mu_);
  std::vector<std::string> victims;
  auto it = map_.find(name);
  *added = it == map_.end();
  if (!*added) {
    usage_ -= it->second->bytes;
    lru_.erase(it->second);
    map_.erase(it);
  }
  while (capacity_ != 0 && usage_ + bytes > capacity_ && !lru_.empty()) {
    Entry& last = lru_.back();
    usage_ -= last.bytes;
    map_.erase(last.name);
    victims.push_back(std::move(last.name));
    lru_.pop_back();
  }
  lru_.push_front(Entry{name, bytes});
  map_[name] = lru_.begin();
  usage_ += bytes;
  return victims;
}

void ObjectIndex::Touch(const std::string& name) {
  internal::MutexLock lock(mu_);
  auto it = map_.find(name);
  if (it != map_.end()) lru_.splice(lru_.begin(), lru_, it->second);
}

void ObjectIndex::Erase(const std::string& name) {
  internal::MutexLock lock(mu_);
  auto it = map_.find(name);
  if (it == map_.end()) return;
  usage_ -= it->second->bytes;
  lru_.erase(it->second);
  map_.erase(it);
}

uint64_t ObjectIndex::usage() const {
  internal::MutexLock lock(mu_);
  return usage_;
}

uint64_t ObjectIndex::size() const {
  internal::MutexLock lock(mu_);
  return lru_.size();
}

}  // namespace kvtier::object
