// GpuAvailable and pinned host memory over the CUDA runtime.
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "gpu/cuda_handles.h"
#include "gpu/cuda_status.h"
#include "gpu/pinned_host.h"
#include "kvtier/gpu.h"
#include "kvtier/tier.h"

namespace kvtier {

Status GpuAvailable(int device) { return internal::CheckDevice(device); }

namespace internal {
namespace {

constexpr size_t kPage = 4096;
size_t RoundUp(size_t n) { return (n + kPage - 1) & ~(kPage - 1); }

}  // namespace

// Anonymous memory page-locked with cudaHostRegister (portable) rather than cudaHostAlloc: the
// driver's cudaHostAlloc memory is a mapping of its device file, which O_DIRECT reads and writes
// (file:// slabs, arena pages written straight to a lower tier, staging slots read into) and io_uring
// fixed buffers may refuse; registered anonymous pages copy to the GPU at the same pinned speed and work
// with both. A larger alignment than a page is met by mapping `alignment` more and unmapping the ends,
// so Free needs nothing but the pointer and size.
void* RegisteredHostAlloc(int device, size_t bytes, size_t alignment) {
  if (bytes == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
  alignment = std::max(alignment, kPage);
  const size_t size = RoundUp(bytes);
  if (size < bytes || size > SIZE_MAX - alignment) return nullptr;
  const size_t span = size + alignment - kPage;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t p = (base + alignment - 1) & ~(uintptr_t{alignment} - 1);
  if (p > base) munmap(m, p - base);
  if (base + span > p + size) munmap(reinterpret_cast<void*>(p + size), base + span - (p + size));
  void* mem = reinterpret_cast<void*>(p);
  madvise(mem, size, MADV_HUGEPAGE);  // fewer TLB entries on long copies; ignored where unsupported
  DeviceScope scope;  // registers in `device`'s context, then gives the caller's device back
  if (!scope.Enter(device).ok() || cudaHostRegister(mem, size, cudaHostRegisterPortable) != cudaSuccess) {
    (void)cudaGetLastError();  // a refusal is not sticky; clear it for the caller's next CUDA call
    munmap(mem, size);
    return nullptr;
  }
  return mem;
}

void RegisteredHostFree(int device, void* p, size_t bytes) {
  if (p == nullptr) return;
  DeviceScope scope;  // a tier's thread may free it: no context on a device other than `device`
  if (scope.Enter(device).ok()) (void)cudaHostUnregister(p);
  (void)cudaGetLastError();
  munmap(p, RoundUp(bytes));
}

namespace {

class RegisteredHostAllocator final : public HostAllocator {
 public:
  explicit RegisteredHostAllocator(int device) : device_(device) {}
  void* Allocate(size_t bytes, size_t alignment) override { return RegisteredHostAlloc(device_, bytes, alignment); }
  void Free(void* p, size_t bytes) override { RegisteredHostFree(device_, p, bytes); }

 private:
  const int device_;
};

}  // namespace
}  // namespace internal

std::shared_ptr<HostAllocator> PinnedHostAllocator(int device) {
  if (!internal::CheckDevice(device).ok()) return nullptr;
  return std::make_shared<internal::RegisteredHostAllocator>(device);
}

Result<std::unique_ptr<PinnedRegistration>> PinnedRegistration::Register(std::span<std::byte> memory,
                                                                         int device) {
  if (memory.empty()) return Status::InvalidArgument("PinnedRegistration: empty range");
  KVTIER_RETURN_IF_ERROR(internal::CheckDevice(device));
  internal::DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  cudaError_t err = cudaHostRegister(memory.data(), memory.size(), cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::IOError("cudaHostRegister of " + FormatBytes(memory.size()) + ": " +
                           cudaGetErrorString(err));
  }
  return std::unique_ptr<PinnedRegistration>(new PinnedRegistration(memory.data(), device));
}

PinnedRegistration::~PinnedRegistration() {
  internal::DeviceScope scope;  // the holder's thread may have no context: none is made on another device
  if (scope.Enter(device_).ok()) (void)cudaHostUnregister(ptr_);
  (void)cudaGetLastError();
}

}  // namespace kvtier
