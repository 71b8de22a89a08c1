// ChunkLanding: how far one chunk of a Store::LoadWithProgress has landed. Tiers report the verified
// byte ranges of the chunk's destination in any order (ReadProgress); ChunkLanding merges them and
// tells the load's LoadProgress each time the verified prefix [0, n) grows.
//
// Thread-safety: Verified and Complete may be called from many threads at once; LoadProgress::Landed
// is called under this object's lock, so a chunk's reports arrive in increasing order.
//
// LandedPrefixes: what a LoadProgress sink keeps of those reports, for a waiter that needs the first
// bytes of every chunk (kvtier_op_wait_bytes): only a rise of the least prefix can satisfy such a
// waiter, so Report says when to wake one. Not thread-safe: its owner's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

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

class LandedPrefixes {
 public:
  explicit LandedPrefixes(size_t chunks = 0) : landed_(chunks, 0), at_least_(chunks) {}

  // Records that chunk `chunk`'s first `bytes` bytes landed (a chunk's reports only grow); true when
  // that raised least().
  bool Report(size_t chunk, uint64_t bytes);
  // The smallest prefix of any chunk (0 until every chunk reported).
  uint64_t least() const { return least_; }
  // How many leading chunks have their first `want` bytes landed.
  size_t Leading(uint64_t want) const;
  size_t size() const { return landed_.size(); }

 private:
  std::vector<uint64_t> landed_;
  uint64_t least_ = 0;
  size_t at_least_;  // how many entries of landed_ equal least_
};

}  // namespace kvtier::internal
