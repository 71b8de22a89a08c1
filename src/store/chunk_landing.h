// ChunkLanding: how far one chunk of a Store::LoadWithProgress has landed. Tiers report the verified
// byte ranges of the chunk's destination in any order (ReadProgress); ChunkLanding merges them and
// tells the load's LoadProgress each time the verified prefix [0, n) grows.
//
// Thread-safety: Verified and Complete may be called from many threads at once; LoadProgress::Landed
// is called under this object's lock, so a chunk's reports arrive in increasing order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "core/thread_annotations.h"
#include "kvtier/store.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

class ChunkLanding final : public ReadProgress {
 public:
  ChunkLanding(LoadProgress* sink, size_t chunk) : sink_(sink), chunk_(chunk) {}

  void Verified(uint64_t offset, uint64_t len) override EXCLUDES(mu_);
  // The whole chunk of `bytes` bytes is verified (a tier that reported nothing, or less).
  void Complete(uint64_t bytes) { Verified(0, bytes); }
  // Whether any byte was reported to the sink: the chunk may not be read again from another tier.
  bool reported() const EXCLUDES(mu_);

 private:
  LoadProgress* const sink_;
  const size_t chunk_;
  mutable Mutex mu_;
  uint64_t prefix_ GUARDED_BY(mu_) = 0;                    // [0, prefix_) verified and reported
  std::map<uint64_t, uint64_t> pending_ GUARDED_BY(mu_);  // verified ranges past a gap: begin -> end
};

}  // namespace kvtier::internal
