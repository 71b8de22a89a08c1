// SeenTable: a bounded memory of chunk keys used once, for Admission::kSecondUse. Direct-mapped: a new
// key may push out an older one that shares its slot, so the table forgets rather than grows; a
// forgotten chunk simply needs one more use to be admitted.
//
// Thread-safety: NoteUse may be called from many threads.
#pragma once

#include <cstddef>
#include <vector>

#include "core/thread_annotations.h"
#include "kvtier/keys.h"

namespace kvtier::internal {

class SeenTable {
 public:
  explicit SeenTable(size_t slots = 1 << 16) : slots_(slots), keys_(slots), used_(slots, false) {}

  // Records a use of `key`; true when it had been used before (second use or later).
  bool NoteUse(const ChunkKey& key) EXCLUDES(mu_) {
    const size_t slot = ChunkKeyHash{}(key) % slots_;
    MutexLock lock(mu_);
    if (used_[slot] && keys_[slot] == key) return true;
    keys_[slot] = key;
    used_[slot] = true;
    return false;
  }

 private:
  const size_t slots_;
  Mutex mu_;
  std::vector<ChunkKey> keys_ GUARDED_BY(mu_);
  std::vector<bool> used_ GUARDED_BY(mu_);
};

}  // namespace kvtier::internal
