#include "tiers/mem/page_arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/stream_copy.h"

namespace kvtier::internal {

Result<MappedRegion> MappedRegion::Map(size_t bytes) {
  MappedRegion r;
  if (bytes == 0) return r;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap " + std::to_string(bytes) + " bytes");
  r.data_ = static_cast<std::byte*>(p);
  r.size_ = bytes;
  return r;
}

MappedRegion::MappedRegion(MappedRegion&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedRegion& MappedRegion::operator=(MappedRegion&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedRegion::~MappedRegion() {
  if (data_) munmap(data_, size_);
}

Result<HostBuffer> HostBuffer::Allocate(std::shared_ptr<HostAllocator> allocator, size_t bytes,
                                        size_t alignment) {
  HostBuffer b;
  if (bytes == 0) return b;
  if (allocator == nullptr) allocator = DefaultHostAllocator();
  void* p = allocator->Allocate(bytes, alignment);
  if (p == nullptr) return Status::IOError("the host allocator has no " + FormatBytes(bytes) + " for the arena", true);
  b.allocator_ = std::move(allocator);
  b.data_ = static_cast<std::byte*>(p);
  b.size_ = bytes;
  return b;
}

HostBuffer::HostBuffer(HostBuffer&& o) noexcept
    : allocator_(std::move(o.allocator_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    allocator_ = std::move(o.allocator_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void HostBuffer::Reset() {
  if (data_ != nullptr) allocator_->Free(data_, size_);
  data_ = nullptr;
  size_ = 0;
  allocator_.reset();
}

Result<std::unique_ptr<PageArena>> PageArena::Create(uint64_t capacity_bytes, uint64_t page_bytes,
                                                     std::shared_ptr<HostAllocator> allocator) {
  if (page_bytes < 64) return Status::InvalidArgument("mem:// page must be at least 64 bytes");
  const uint64_t pages = capacity_bytes / page_bytes;
  if (pages == 0) {
    return Status::InvalidArgument("mem:// capacity " + FormatBytes(capacity_bytes) +
                                   " is smaller than one page (" + FormatBytes(page_bytes) + ")");
  }
  if (pages >= kNoPage) {
    return Status::InvalidArgument("mem:// capacity / page gives too many pages; use a larger page=");
  }
  std::unique_ptr<PageArena> a(new PageArena);
  a->page_bytes_ = page_bytes;
  a->total_pages_ = static_cast<uint32_t>(pages);
  a->free_count_ = a->total_pages_;
  KVTIER_ASSIGN_OR_RETURN(a->pages_, HostBuffer::Allocate(std::move(allocator), pages * page_bytes, 4096));
  KVTIER_ASSIGN_OR_RETURN(a->next_region_, MappedRegion::Map(pages * sizeof(uint32_t)));
  a->next_ = reinterpret_cast<uint32_t*>(a->next_region_.data());
  return a;
}

Status PageArena::Populate() const {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
  if (::madvise(pages_.data(), pages_.size(), MADV_POPULATE_WRITE) == 0) return Status::OK();
  if (errno == ENOMEM || errno == EFAULT) {
    return Status::NoSpace("mem:// populate=1: the host cannot commit " + FormatBytes(pages_.size()));
  }
  return Status::FromErrno(errno, "mem:// populate=1 (needs Linux 5.14 and the default host allocator)");
}

uint32_t PageArena::PagesFor(uint64_t bytes) const {
  const uint64_t n = (bytes + page_bytes_ - 1) / page_bytes_;
  return n == 0 ? 1 : (n > total_pages_ ? kNoPage : static_cast<uint32_t>(n));
}

uint32_t PageArena::Allocate(uint32_t count, uint32_t* last) {
  // Pages at or above high_water_ were never used: they are taken in address order, so a fresh arena
  // gives each chunk one contiguous run. Below it, the free list is a chain through next_.
  uint32_t first = kNoPage, tail = kNoPage;
  auto append = [&](uint32_t p) {
    if (tail == kNoPage) {
      first = p;
    } else {
      next_[tail] = p;
    }
    tail = p;
  };
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t p;
    if (free_head_ != kNoPage) {
      p = free_head_;
      free_head_ = next_[p];
    } else {
      p = high_water_++;
    }
    append(p);
  }
  next_[tail] = kNoPage;
  free_count_ -= count;
  *last = tail;
  return first;
}

void PageArena::Free(uint32_t first, uint32_t last, uint32_t count) {
  next_[last] = free_head_;
  free_head_ = first;
  free_count_ += count;
}

namespace {

// Visits the contiguous runs of a chain, at most `bytes` bytes in all.
template <typename Fn>
void VisitRuns(std::byte* base, const uint32_t* next, uint64_t page, uint32_t first, uint64_t bytes,
               Fn&& fn) {
  uint32_t p = first;
  while (bytes > 0 && p != PageArena::kNoPage) {
    uint32_t end = p;  // last page of this run
    uint64_t run = page;
    while (run < bytes && next[end] == end + 1) {
      ++end;
      run += page;
    }
    const size_t len = static_cast<size_t>(run < bytes ? run : bytes);
    fn(base + static_cast<uint64_t>(p) * page, len);
    bytes -= len;
    p = next[end];
  }
}

}  // namespace

void PageArena::ForEachRun(uint32_t first, uint64_t bytes,
                           const std::function<void(std::byte*, size_t)>& fn) const {
  VisitRuns(pages_.data(), next_, page_bytes_, first, bytes, fn);
}

void PageArena::Write(uint32_t first, GatherList src) const {
  size_t piece = 0, off = 0;
  VisitRuns(pages_.data(), next_, page_bytes_, first, TotalBytes(src), [&](std::byte* p, size_t len) {
    while (len > 0) {
      if (off == src[piece].size()) {
        ++piece;
        off = 0;
        continue;
      }
      const size_t n = std::min(len, src[piece].size() - off);
      std::memcpy(p, src[piece].data() + off, n);
      p += n;
      off += n;
      len -= n;
    }
  });
}

void PageArena::Read(uint32_t first, ScatterList dst) const { ReadRange(first, 0, TotalBytes(dst), dst); }

void PageArena::ReadRange(uint32_t first, uint64_t offset, uint64_t len, ScatterList dst,
                          const std::function<void(const std::byte*, size_t)>& before) const {
  // A large range is streamed piece by piece (fenced once at the end), however small its destination
  // pieces are: a chunk scattered into paged KV blocks is as large a copy as a contiguous one.
  const bool stream = len >= kStreamCopyMinBytes;
  // The destination piece and offset where chain byte `offset` goes.
  size_t piece = 0;
  uint64_t off = offset;
  while (piece < dst.size() && off >= dst[piece].size()) off -= dst[piece++].size();
  uint64_t at = 0;          // chain offset of the run being visited
  uint64_t uncopied = len;  // bytes of the range not yet copied
  size_t prefetched = piece;  // the pieces up to this one need no prefetch
  VisitRuns(pages_.data(), next_, page_bytes_, first, offset + len, [&](std::byte* p, size_t run) {
    const uint64_t run_begin = at;
    at += run;
    if (at <= offset) return;  // wholly before the range
    const uint64_t skip = offset > run_begin ? offset - run_begin : 0;
    p += skip;
    uint64_t left = run - skip;
    while (left > 0) {
      if (off == dst[piece].size()) {
        ++piece;
        off = 0;
        continue;
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, dst[piece].size() - off));
      // In a piece of a scattered copy that runs on into the next piece: that piece's page walks
      // start now, while this one streams.
      const uint64_t rest = dst[piece].size() - off;  // of this piece
      if (stream && prefetched <= piece && piece + 1 < dst.size() && uncopied > rest) {
        PrefetchPages(dst[piece + 1].data(), static_cast<size_t>(std::min<uint64_t>(dst[piece + 1].size(), uncopied - rest)));
        prefetched = piece + 1;
      }
      if (before) {
        n = std::min(n, kReadBlock);
        before(p, n);
      }
      if (stream) {
        StreamCopyPiece(dst[piece].data() + off, p, n);
      } else {
        std::memcpy(dst[piece].data() + off, p, n);
      }
      p += n;
      off += n;
      left -= n;
      uncopied -= n;
    }
  });
  if (stream) StreamFence();
}

std::vector<std::span<const std::byte>> PageArena::Runs(uint32_t first, uint64_t bytes) const {
  std::vector<std::span<const std::byte>> runs;
  VisitRuns(pages_.data(), next_, page_bytes_, first, bytes,
            [&](std::byte* p, size_t n) { runs.emplace_back(p, n); });
  return runs;
}

}  // namespace kvtier::internal
