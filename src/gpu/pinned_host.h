// Page-locked host memory by cudaHostRegister of anonymous pages (CUDA builds only): what
// PinnedHostAllocator hands out and what GpuTransfer's own staging slots are. Not cudaHostAlloc: that
// memory is a mapping of the driver's device file, which O_DIRECT reads (a file:// load straight into a
// staging slot) and io_uring fixed buffers may refuse.
#pragma once

#include <cstddef>

namespace kvtier::internal {

// `bytes` (rounded up to pages) aligned to `alignment` (a power of two; at least a page), registered
// portable with the CUDA runtime while `device` is current (the caller's device is restored after);
// nullptr when the memory cannot be mapped or the driver refuses to lock it. Thread-safe.
void* RegisteredHostAlloc(int device, size_t bytes, size_t alignment);
// Unregisters (with `device`, the one it was registered with, current: never a context on another
// device, whatever thread frees it) and unmaps memory from RegisteredHostAlloc; nullptr: nothing.
void RegisteredHostFree(int device, void* p, size_t bytes);

}  // namespace kvtier::internal
