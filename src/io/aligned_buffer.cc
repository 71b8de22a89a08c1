#include <cstdlib>
#include <utility>

#include "io/chunk_io.h"

namespace kvtier::internal {

AlignedBuffer AlignedBuffer::Allocate(size_t size, size_t align) {
  AlignedBuffer b;
  if (size == 0) return b;
  const size_t rounded = AlignUp(size, align);  // aligned_alloc wants a multiple of the alignment
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) return b;
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
