// ReadSlab: the reader's bounce memory. Chunks that cannot be read straight into their destination are
// read into a region of the slab, verified and copied out; the region is then reused by the next chunk,
// so steady reads allocate nothing and fault no fresh pages in, at any depth.
//
// The slab is a few aligned segments (2 MiB aligned, huge-page advised), carved on first need up to a
// cap and then kept for the reader's life: a reader whose destinations are all aligned never touches
// it. Each segment has a stable index so an io_uring can register it as a fixed buffer once
// (SegmentIovec) and read into it with READ_FIXED. When no segment has room and the cap is reached,
// Allocate fails and the caller uses heap memory (counted by the reader as a slab miss).
//
// Thread-safe.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/thread_annotations.h"
#include "io/chunk_io.h"

namespace kvtier::internal {

class ReadSlab {
 public:
  static constexpr uint32_t kMaxSegments = 32;
  static constexpr uint64_t kSegmentAlign = uint64_t{2} << 20;

  // `cap_bytes`: the most memory all segments together may hold.
  explicit ReadSlab(uint64_t cap_bytes) : cap_(cap_bytes) {}

  struct Region {
    std::byte* data = nullptr;
    uint64_t len = 0;
    uint32_t segment = 0;  // index for SegmentIovec / fixed-buffer registration
    uint64_t offset = 0;   // in the segment
  };
  // A region of at least `len` bytes (rounded up to 4 KiB), 4 KiB aligned; nullopt when none fits.
  std::optional<Region> Allocate(uint64_t len) EXCLUDES(mu_);
  void Free(const Region& region) EXCLUDES(mu_);

  // Segments carved so far (they are never returned before the slab is destroyed).
  uint32_t segments() const EXCLUDES(mu_);
  uint64_t bytes() const EXCLUDES(mu_);
  // The memory of segment `i` < segments(), for io_uring_register_buffers.
  iovec SegmentIovec(uint32_t i) const EXCLUDES(mu_);

 private:
  struct Segment {
    AlignedBuffer memory;
    std::map<uint64_t, uint64_t> free;  // offset -> length, coalesced
  };
  static std::optional<uint64_t> TakeFrom(Segment& s, uint64_t len);

  const uint64_t cap_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::internal
