// What an object tier knows it stores: the objects this process wrote (and, where the tier listed the
// store at open, what it found there), with their sizes, in LRU order. With a capacity it is the
// eviction order: a Put makes room by deleting the least recently used objects first. Objects other
// writers put into the store are not counted: the bound is on what this process keeps there.
// Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/thread_annotations.h"
#include "kvtier/status.h"

namespace kvtier::object {

class ObjectIndex {
 public:
  explicit ObjectIndex(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Records `name` of `bytes` as the most recent object, taking the least recent ones out to stay
  // within capacity; returns the names taken out (the caller deletes them). NoSpace when `bytes`
  // alone exceed the capacity (nothing changes). `*added` tells whether `name` was new.
  Result<std::vector<std::string>> Add(const std::string& name, uint64_t bytes, bool* added) EXCLUDES(mu_);
  void Touch(const std::string& name) EXCLUDES(mu_);
  void Erase(const std::string& name) EXCLUDES(mu_);

  uint64_t capacity() const { return capacity_; }
  uint64_t usage() const EXCLUDES(mu_);
  uint64_t size() const EXCLUDES(mu_);

 private:
  struct Entry {
    std::string name;
    uint64_t bytes;
  };
  const uint64_t capacity_;
  mutable internal::Mutex mu_;
  std::list<Entry> lru_ GUARDED_BY(mu_);  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> map_ GUARDED_BY(mu_);
  uint64_t usage_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::object
