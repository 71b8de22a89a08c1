// SeenTable: a bounded memory of chunk keys used once, for Admission::kSecondUse. Direct-mapped: a new
// key may push out an older one that shares its slot, so the table forgets rather than grows; a
// forgotten chunk simply needs one more use to be admitted.
//
// Thread-safety: NoteUse may be called from many threads.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "kvtier/keys.h"

namespace kvtier::internal {

class SeenTable {
 public:
  explicit SeenTable(size_t slots = 1 << 16) : keys_(slots), used_(slots, false) {}

  // Records a use of `key`; true when it had been used before (second use or later).
  bool NoteUse(const ChunkKey& key) {
    const size_t slot = ChunkKeyHash{}(key) % keys_.size();
    std::lock_guard<std::mutex> lock(mu_);
    if (used_[slot] && keys_[slot] == key) return true;
    keys_[slot] = key;
    used_[slot] = true;
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<ChunkKey> keys_;  // guarded by mu_
  std::vector<bool> used_;      // guarded by mu_
};

}  // namespace kvtier::internal
