#include <sys/mman.h>

#include <cstdlib>
#include <utility>

#include "io/chunk_io.h"

namespace kvtier::internal {
namespace {

// Buffers of at least one transparent huge page start on a huge-page boundary and ask for huge pages.
// An O_DIRECT read is one device request per physically contiguous run of its destination (up to the
// device's segment limit): into scattered 4 KiB pages a 1 MiB read splits into several requests and
// adjacent reads no longer merge, so the same bytes take several times the requests (and the time) only
// because of where the allocator's pages happened to lie. Huge pages make that independent of chance.
constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

AlignedBuffer AlignedBuffer::Allocate(size_t size, size_t align) {
  AlignedBuffer b;
  if (size == 0) return b;
  const size_t rounded = AlignUp(size, align);
  const bool huge = rounded >= kHugePage && align <= kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kHugePage : align, rounded) != 0) return b;
  if (huge) (void)madvise(p, rounded - rounded % kHugePage, MADV_HUGEPAGE);  // advice only: may be refused
  b.data_ = static_cast<std::byte*>(p);
  b.size_ = rounded;
  return b;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

}  // namespace kvtier::internal
