// Owning wrappers of CUDA runtime objects (CUDA builds only): pinned host memory, device memory,
// events and streams, each released in its destructor, and DeviceScope, which sets the device for a
// call and gives the caller's back. Not thread-safe; the caller has set the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "gpu/cuda_status.h"
#include "gpu/pinned_host.h"

namespace kvtier::internal {

// Sets `device` current on this thread for the scope's life and then restores the device that was
// current before (kvtier's calls leave the caller's thread as they found it).
class DeviceScope {
 public:
  DeviceScope() = default;
  ~DeviceScope() { Restore(); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  Status Enter(int device) {
    Restore();
    KVTIER_CUDA_RETURN(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) {
      KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
      set_ = true;
    }
    return Status::OK();
  }
  void Restore() {
    if (set_) (void)cudaSetDevice(prev_);
    set_ = false;
  }

 private:
  int prev_ = 0;
  bool set_ = false;
};

// Page-locked staging (RegisteredHostAlloc: cudaHostRegister'ed anonymous pages, 4 KiB aligned, so
// O_DIRECT reads may land in it).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { RegisteredHostFree(ptr_, bytes_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Frees what it held before.
  Status Allocate(int device, size_t bytes) {
    RegisteredHostFree(ptr_, bytes_);
    bytes_ = 0;
    ptr_ = RegisteredHostAlloc(device, bytes, 4096);
    if (ptr_ == nullptr) return Status::NoSpace("GPU staging: cannot map and page-lock " + std::to_string(bytes) + " bytes");
    bytes_ = bytes;
    return Status::OK();
  }
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Frees what it held before.
  Status Allocate(size_t bytes) {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = nullptr;
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
