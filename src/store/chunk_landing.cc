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

bool LandedPrefixes::Report(size_t chunk, uint64_t bytes) {
  const uint64_t was = landed_[chunk];
  landed_[chunk] = bytes;
  // The least rises when the last chunk that held it moves past it: then one pass finds the new one
  // (at most once per distinct value of the least, not once per report).
  if (was != least_ || bytes == was || --at_least_ > 0) return false;
  least_ = *std::min_element(landed_.begin(), landed_.end());
  at_least_ = static_cast<size_t>(std::count(landed_.begin(), landed_.end(), least_));
  return true;
}

size_t LandedPrefixes::Leading(uint64_t want) const {
  size_t n = 0;
  while (n < landed_.size() && landed_[n] >= want) ++n;
  return n;
}

}  // namespace kvtier::internal
