#include "store/chunk_landing.h"

#include <algorithm>

namespace kvtier::internal {

void ChunkLanding::Verified(uint64_t offset, uint64_t len) {
  if (len == 0) return;
  MutexLock lock(mu_);
  const uint64_t end = offset + len;
  if (end <= prefix_) return;
  if (offset > prefix_) {
    uint64_t& known = pending_[offset];
    known = std::max(known, end);
    return;
  }
  uint64_t prefix = end;
  // Ranges that now touch the prefix extend it.
  for (auto it = pending_.begin(); it != pending_.end() && it->first <= prefix; it = pending_.erase(it)) {
    prefix = std::max(prefix, it->second);
  }
  prefix_ = prefix;
  sink_->Landed(chunk_, prefix);
}

bool ChunkLanding::reported() const {
  MutexLock lock(mu_);
  return prefix_ > 0;
}

}  // namespace kvtier::internal
