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

// Sets `device` current on this thread for the scope's life and then gives the thread back the CUDA
// context it had before: the caller's context (its device) on a thread that had one, no context at all on
// a thread that had none (a fresh kvtier reader thread, an engine thread that never touched CUDA). It never
// makes a context on any device but `device`: restoring "device 0" with cudaSetDevice on a thread that
// had no context would create one on GPU 0 (CUDA 12+ makes the primary context in cudaSetDevice), hundreds
// of MiB there for every engine worker of a multi-GPU host.
class DeviceScope {
 public:
  DeviceScope() = default;
  ~DeviceScope() { Restore(); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  Status Enter(int device);
  void Restore();

 private:
  void* prev_ctx_ = nullptr;  // the driver context current before (a CUcontext), nullptr for none
  int prev_ = 0;              // the runtime's device before, where the driver gives no context calls
  bool contexts_ = false;     // whether the driver's context calls are there (prev_ctx_ is known)
  bool set_ = false;
};

// Page-locked staging (RegisteredHostAlloc: cudaHostRegister'ed anonymous pages, 4 KiB aligned, so
// O_DIRECT reads may land in it).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { RegisteredHostFree(device_, ptr_, bytes_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Frees what it held before.
  Status Allocate(int device, size_t bytes) {
    RegisteredHostFree(device_, ptr_, bytes_);
    bytes_ = 0;
    device_ = device;
    ptr_ = RegisteredHostAlloc(device, bytes, 4096);
    if (ptr_ == nullptr) return Status::NoSpace("GPU staging: cannot map and page-lock " + std::to_string(bytes) + " bytes");
    bytes_ = bytes;
    return Status::OK();
  }
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
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
