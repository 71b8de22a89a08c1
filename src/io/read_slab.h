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
// Segments come from the HostAllocator given at construction when there is one (e.g. pinned memory,
// include/kvtier/gpu.h: PinnedHostAllocator), each asked for 4 KiB aligned and given back to it, same
// pointer and size, when the slab is destroyed; a segment the allocator refuses (nullptr) is taken
// from the heap as without one, so reads never fail for it. The allocator outlives the slab (held).
//
// Thread-safe.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/thread_annotations.h"
#include "io/chunk_io.h"
#include "kvtier/host_allocator.h"

namespace kvtier::internal {

class ReadSlab {
 public:
  static constexpr uint32_t kMaxSegments = 32;
  static constexpr uint64_t kSegmentAlign = uint64_t{2} << 20;

  // `cap_bytes`: the most memory all segments together may hold. `allocator`: where segments come
  // from; null: aligned heap memory.
  explicit ReadSlab(uint64_t cap_bytes, std::shared_ptr<HostAllocator> allocator = nullptr)
      : cap_(cap_bytes), allocator_(std::move(allocator)) {}

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
    Segment() = default;
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;
    ~Segment() {
      if (from != nullptr) from->Free(data, size);
    }
    std::byte* data = nullptr;
    uint64_t size = 0;
    HostAllocator* from = nullptr;  // set: `data` came from it (the slab's allocator, which outlives this)
    AlignedBuffer heap;             // else: the memory
    std::map<uint64_t, uint64_t> free;  // offset -> length, coalesced
  };
  static std::optional<uint64_t> TakeFrom(Segment& s, uint64_t len);
  // The memory of a new segment of `size` bytes (a 2 MiB multiple): false when none can be had.
  bool Carve(Segment& s, uint64_t size) const;

  const uint64_t cap_;
  const std::shared_ptr<HostAllocator> allocator_;  // declared before segments_: destroyed after them
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::internal
