// GpuAvailable and pinned host memory over the CUDA runtime.
#include <cuda_runtime_api.h>

#include <string>

#include "gpu/cuda_status.h"
#include "kvtier/gpu.h"
#include "kvtier/tier.h"

namespace kvtier {

Status GpuAvailable(int device) { return internal::CheckDevice(device); }

Result<void*> PinnedAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("PinnedAllocator: 0 bytes");
  KVTIER_RETURN_IF_ERROR(internal::CheckDevice(0));
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::NoSpace("cudaHostAlloc of " + FormatBytes(bytes) + ": " + cudaGetErrorString(err));
  }
  return p;
}

void PinnedAllocator::Free(void* ptr, size_t /*bytes*/) {
  if (ptr != nullptr) (void)cudaFreeHost(ptr);
}

Result<std::unique_ptr<PinnedRegistration>> PinnedRegistration::Register(std::span<std::byte> memory) {
  if (memory.empty()) return Status::InvalidArgument("PinnedRegistration: empty range");
  KVTIER_RETURN_IF_ERROR(internal::CheckDevice(0));
  cudaError_t err = cudaHostRegister(memory.data(), memory.size(), cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::IOError("cudaHostRegister of " + FormatBytes(memory.size()) + ": " +
                           cudaGetErrorString(err));
  }
  return std::unique_ptr<PinnedRegistration>(new PinnedRegistration(memory.data()));
}

PinnedRegistration::~PinnedRegistration() { (void)cudaHostUnregister(ptr_); }

}  // namespace kvtier
