// Plain device-memory helpers for tests, benchmarks and the C API's checks: allocate, fill, copy and
// synchronise on one device. Every call is synchronous. Without CUDA (KVTIER_CUDA=OFF) or without a
// device they return NotSupported with the reason. Thread-safe (the CUDA runtime is).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/status.h"

namespace kvtier::internal {

Result<void*> DeviceAlloc(int device, size_t bytes);
void DeviceFree(int device, void* ptr);  // nullptr: nothing
Status DeviceMemset(int device, void* ptr, int byte, size_t bytes);
// Returns once the bytes are on the device (a pageable cudaMemcpy may return while its DMA is still
// running: the copy is followed by a device synchronisation, so work on any stream sees the bytes).
Status CopyToDevice(int device, void* dst, const void* src, size_t bytes);
Status CopyToHost(int device, void* dst, const void* src, size_t bytes);

// Tests: an engine's stream (non-blocking), destroyed by StreamDestroy after synchronising.
Result<void*> StreamCreate(int device);
void StreamDestroy(int device, void* stream);
Status StreamSynchronize(int device, void* stream);
// Tests: queues on `stream` a host function that sleeps `sleep_ms`, then a memset of `bytes` at `ptr`,
// so the stream is still busy writing those bytes for a while after the call returns.
Status QueueDelayedFill(int device, void* stream, int sleep_ms, void* ptr, int byte, size_t bytes);
// Tests: the devices there are, the calling thread's current device, and setting it.
Result<int> DeviceCount();
Result<int> CurrentDevice();
Status SetCurrentDevice(int device);
// Tests: whether the calling thread has a CUDA context current, and whether `device`'s primary context
// is active in this process (the driver's cuCtxGetCurrent and cuDevicePrimaryCtxGetState, through the
// runtime's driver entry points). Neither makes a context.
Result<bool> ContextCurrent();
Result<bool> PrimaryContextActive(int device);
// Tests: starts / ends (and discards) the capture of `stream` into a CUDA graph.
Status CaptureBegin(int device, void* stream);
Status CaptureEnd(int device, void* stream);

// Tests: whether the CUDA runtime sees `host` as page-locked host memory (cudaPointerGetAttributes
// type cudaMemoryTypeHost: cudaHostAlloc'd or cudaHostRegister'ed); false for pageable memory.
Result<bool> IsPinnedHostMemory(const void* host);

// Reference figure of the benchmarks: plain copies of `piece` bytes from `host` (pinned, or pageable if
// the caller passed such memory) into one device buffer until `total` bytes have moved; returns GB/s
// (10^9 bytes per second) measured with CUDA events.
Result<double> TimedHostToDevice(int device, const void* host, size_t piece, uint64_t total);

}  // namespace kvtier::internal
