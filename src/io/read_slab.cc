#include "io/read_slab.h"

#include <algorithm>

namespace kvtier::internal {

std::optional<uint64_t> ReadSlab::TakeFrom(Segment& s, uint64_t len) {
  for (auto it = s.free.begin(); it != s.free.end(); ++it) {  // first fit: few, large regions
    if (it->second < len) continue;
    const uint64_t off = it->first;
    const uint64_t rest = it->second - len;
    s.free.erase(it);
    if (rest > 0) s.free.emplace(off + len, rest);
    return off;
  }
  return std::nullopt;
}

std::optional<ReadSlab::Region> ReadSlab::Allocate(uint64_t len) {
  len = AlignUp(std::max<uint64_t>(len, 1));
  MutexLock lock(mu_);
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    if (auto off = TakeFrom(*segments_[i], len)) {
      return Region{segments_[i]->data + *off, len, i, *off};
    }
  }
  // A new segment holds at least this request; 2 MiB multiples keep it on huge pages.
  const uint64_t size = AlignUp(len, kSegmentAlign);
  if (segments_.size() >= kMaxSegments || bytes_ + size > cap_) return std::nullopt;
  auto seg = std::make_unique<Segment>();
  if (!Carve(*seg, size)) return std::nullopt;
  if (size > len) seg->free.emplace(len, size - len);
  bytes_ += size;
  segments_.push_back(std::move(seg));
  const uint32_t i = static_cast<uint32_t>(segments_.size() - 1);
  return Region{segments_[i]->data, len, i, 0};
}

bool ReadSlab::Carve(Segment& s, uint64_t size) const {
  if (allocator_ != nullptr) {
    if (void* p = allocator_->Allocate(size, kChunkAlign); p != nullptr) {
      s.data = static_cast<std::byte*>(p);
      s.size = size;
      s.from = allocator_.get();
      return true;
    }
  }
  s.heap = AlignedBuffer::Allocate(size, kSegmentAlign);  // no allocator, or it refused
  s.data = s.heap.data();
  s.size = size;
  return s.data != nullptr;
}

void ReadSlab::Free(const Region& r) {
  if (r.data == nullptr) return;
  MutexLock lock(mu_);
  auto& free = segments_[r.segment]->free;
  uint64_t off = r.offset, len = r.len;
  auto next = free.lower_bound(off);
  if (next != free.end() && next->first == off + len) {  // merge with the region after
    len += next->second;
    next = free.erase(next);
  }
  if (next != free.begin()) {  // and the one before
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      free.erase(prev);
    }
  }
  free.emplace(off, len);
}

uint32_t ReadSlab::segments() const {
  MutexLock lock(mu_);
  return static_cast<uint32_t>(segments_.size());
}

uint64_t ReadSlab::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

iovec ReadSlab::SegmentIovec(uint32_t i) const {
  MutexLock lock(mu_);
  const Segment& s = *segments_[i];
  return iovec{s.data, s.size};
}

}  // namespace kvtier::internal
