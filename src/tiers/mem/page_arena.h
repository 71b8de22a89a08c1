// PageArena: the one allocation behind the mem:// tier. It reserves `capacity` bytes once and hands them
// out as fixed-size pages; a chunk is a chain of pages linked through a preallocated next-page array,
// so storing a chunk never calls malloc.
//
// Ownership: the arena owns its mapping and releases it on destruction.
// Thread-safety: Allocate/Free and free_pages() need external synchronisation (the tier's mutex).
// Write/Read/ForEachRun on pages that the caller owns (allocated and not yet freed) may run on many
// threads at once without the lock: they read next-page links that were set before the pages were
// handed out, and touch only those pages' bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/host_allocator.h"

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::internal {

// Zero-filled bytes in an anonymous mapping: memory is committed only where it is touched, so pools
// sized for the worst case cost nothing until used. Move-only; unmaps on destruction.
class MappedRegion {
 public:
  MappedRegion() = default;
  // IOError (retryable) when the address space cannot be reserved.
  static Result<MappedRegion> Map(size_t bytes);
  MappedRegion(MappedRegion&& o) noexcept;
  MappedRegion& operator=(MappedRegion&& o) noexcept;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;
  ~MappedRegion();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// A buffer from a HostAllocator, given back on destruction. Move-only.
class HostBuffer {
 public:
  HostBuffer() = default;
  // IOError (retryable) when the allocator has no memory for it.
  static Result<HostBuffer> Allocate(std::shared_ptr<HostAllocator> allocator, size_t bytes, size_t alignment);
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { Reset(); }

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset();
  std::shared_ptr<HostAllocator> allocator_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

class PageArena {
 public:
  static constexpr uint32_t kNoPage = UINT32_MAX;

  // InvalidArgument when page_bytes < 64 or capacity holds no page or more than 2^32-2 pages; IOError
  // when `allocator` (null: DefaultHostAllocator()) has no memory for the pages. Only the pages come
  // from `allocator`; the arena's own bookkeeping stays in an anonymous mapping.
  static Result<std::unique_ptr<PageArena>> Create(uint64_t capacity_bytes, uint64_t page_bytes,
                                                   std::shared_ptr<HostAllocator> allocator = nullptr);

  // Commits and maps every page now (MADV_POPULATE_WRITE), so no first touch of a page faults on the
  // data path: IOError when the kernel cannot (Linux < 5.14, or an allocator whose memory is not an
  // ordinary mapping), NoSpace when the memory is not there.
  Status Populate() const;

  uint64_t page_bytes() const { return page_bytes_; }
  uint32_t total_pages() const { return total_pages_; }
  uint32_t free_pages() const { return free_count_; }
  uint32_t PagesFor(uint64_t bytes) const;  // at least one page, so every chunk owns a first page

  // Takes `count` pages off the free list. REQUIRES: count <= free_pages(). Returns the first page
  // and sets *last to the last one; the chain ends in kNoPage.
  uint32_t Allocate(uint32_t count, uint32_t* last);
  // Returns a chain of `count` pages (first..last) to the free list in O(1).
  void Free(uint32_t first, uint32_t last, uint32_t count);

  // Calls fn(ptr, len) for each run of physically contiguous pages holding the first `bytes` bytes of
  // the chain starting at `first`; contiguous pages are merged so copies stay long.
  void ForEachRun(uint32_t first, uint64_t bytes,
                  const std::function<void(std::byte*, size_t)>& fn) const;
  // Copies `src` into the chain starting at `first` (which must be large enough).
  void Write(uint32_t first, GatherList src) const;
  // Copies the first TotalBytes(dst) bytes of the chain into `dst`.
  void Read(uint32_t first, ScatterList dst) const;
  // Copies bytes [offset, offset + len) of the chain to the same offsets of `dst` (so several threads
  // can fill disjoint ranges of one destination), with core/stream_copy.h: the caller's buffers are not
  // pulled into this core's cache. When `before` is set it is called, in order, on every block of the
  // source (at most kReadBlock bytes) right before that block is copied, so a checksum pass over the
  // source and the copy share one trip through DRAM. REQUIRES: offset + len <= TotalBytes(dst).
  static constexpr size_t kReadBlock = size_t{256} << 10;
  void ReadRange(uint32_t first, uint64_t offset, uint64_t len, ScatterList dst,
                 const std::function<void(const std::byte*, size_t)>& before = {}) const;
  // The first `bytes` bytes of the chain as runs of contiguous memory, in order (for BorrowedChunk).
  std::vector<std::span<const std::byte>> Runs(uint32_t first, uint64_t bytes) const;
  // The pages' memory, for tests that check where the chunks live.
  const std::byte* base() const { return pages_.data(); }

 private:
  PageArena() = default;

  uint64_t page_bytes_ = 0;
  uint32_t total_pages_ = 0;
  uint32_t free_count_ = 0;
  uint32_t free_head_ = kNoPage;
  uint32_t high_water_ = 0;   // pages at or above it were never handed out
  uint32_t* next_ = nullptr;  // next page of the same chain (a chunk's or the free list's)
  HostBuffer pages_;
  MappedRegion next_region_;
};

}  // namespace kvtier::internal
