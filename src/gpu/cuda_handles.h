// Owning wrappers of CUDA runtime objects (CUDA builds only): pinned host memory, device memory,
// events and streams, each released in its destructor. Not thread-safe; the caller has set the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "gpu/cuda_status.h"

namespace kvtier::internal {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status Allocate(size_t bytes) {
    KVTIER_CUDA_RETURN(cudaHostAlloc(&ptr_, bytes, cudaHostAllocPortable), "cudaHostAlloc");
    return Status::OK();
  }
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Status Allocate(size_t bytes) {
    KVTIER_CUDA_RETURN(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    return Status::OK();
  }
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// An event for ordering and completion only: no timing, and cudaEventSynchronize blocks the thread
// (cudaEventBlockingSync) instead of spinning on the GPU.
class Event {
 public:
  Event() = default;
  ~Event() {
    if (ev_ != nullptr) (void)cudaEventDestroy(ev_);
  }
  Event(Event&& o) noexcept : ev_(std::exchange(o.ev_, nullptr)) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Status Create() {
    KVTIER_CUDA_RETURN(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming | cudaEventBlockingSync),
                       "cudaEventCreate");
    return Status::OK();
  }
  cudaEvent_t get() const { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

class Stream {
 public:
  Stream() = default;
  ~Stream() {
    if (s_ != nullptr) {
      (void)cudaStreamSynchronize(s_);
      (void)cudaStreamDestroy(s_);
    }
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // Non-blocking: does not wait for the legacy default stream the engine may use.
  Status Create() {
    KVTIER_CUDA_RETURN(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
    return Status::OK();
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace kvtier::internal
