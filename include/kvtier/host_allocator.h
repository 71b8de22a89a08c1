// HostAllocator: where kvtier takes its large host buffers from (the mem:// arena, the file:// and
// fs:// readers' bounce slabs). By default an anonymous mmap; an engine that wants them in memory a
// device can copy from at full speed passes its own, e.g. PinnedHostAllocator() (kvtier/gpu.h).
//
// kvtier calls Allocate once per buffer (a whole arena, or one of a reader slab's few segments; never
// per chunk) and Free exactly once with the same pointer and size when the buffer's owner (a tier, a
// Store) is destroyed. The memory needs no particular contents. An allocator must outlive every tier and Store it is given to; holding it by
// shared_ptr in the options does that.
//
// Thread-safety: Allocate and Free may be called from any thread, though never for the same buffer
// at once.
#pragma once

#include <cstddef>
#include <memory>

namespace kvtier {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;

  // `bytes` of readable, writable memory aligned to at least `alignment` (a power of two, at least
  // 4096), or nullptr when it cannot be had (a mem:// open then fails with IOError; a reader slab
  // takes that segment from the heap instead).
  virtual void* Allocate(size_t bytes, size_t alignment) = 0;
  // Returns a buffer from Allocate. REQUIRES: `p` and `bytes` as Allocate returned and was given.
  virtual void Free(void* p, size_t bytes) = 0;
};

// The default: anonymous mmap (lazily committed, MADV_HUGEPAGE advised). Never null; shared.
std::shared_ptr<HostAllocator> DefaultHostAllocator();

}  // namespace kvtier
