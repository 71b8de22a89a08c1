// The GPU API in a build without CUDA (KVTIER_CUDA=OFF): every call that needs a GPU is NotSupported.
#include "gpu/device_memory.h"
#include "gpu/gpu_plan.h"
#include "kvtier/gpu.h"

namespace kvtier {
namespace internal {

Status NoCudaStatus() {
  return Status::NotSupported("GPU path: kvtier was built without CUDA (configure with -DKVTIER_CUDA=ON "
                              "and nvcc on the build machine)");
}

}  // namespace internal

using internal::NoCudaStatus;

Status GpuAvailable(int /*device*/) { return NoCudaStatus(); }

std::shared_ptr<HostAllocator> PinnedHostAllocator(int /*device*/) { return nullptr; }

Result<std::unique_ptr<PinnedRegistration>> PinnedRegistration::Register(std::span<std::byte> /*memory*/,
                                                                         int /*device*/) {
  return NoCudaStatus();
}
PinnedRegistration::~PinnedRegistration() { (void)ptr_, (void)device_; }  // never constructed here

Result<std::unique_ptr<GpuTransfer>> GpuTransfer::Open(const Layout& layout, const PagedKvCache& cache,
                                                       const GpuTransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::ValidateOpen(layout, cache, options));  // same answers as with CUDA
  return NoCudaStatus();
}

Result<std::unique_ptr<GpuTransfer>> GpuTransfer::OpenPieces(const Layout& layout, int /*device*/,
                                                             const GpuTransferOptions& options) {
  KVTIER_RETURN_IF_ERROR(internal::ValidateOptions(layout, options));  // same answers as with CUDA
  return NoCudaStatus();
}

}  // namespace kvtier

namespace kvtier::internal {

Result<void*> DeviceAlloc(int /*device*/, size_t /*bytes*/) { return NoCudaStatus(); }
void DeviceFree(int /*device*/, void* /*ptr*/) {}
Status DeviceMemset(int, void*, int, size_t) { return NoCudaStatus(); }
Status CopyToDevice(int, void*, const void*, size_t) { return NoCudaStatus(); }
Status CopyToHost(int, void*, const void*, size_t) { return NoCudaStatus(); }
Result<double> TimedHostToDevice(int, const void*, size_t, uint64_t) { return NoCudaStatus(); }
Result<bool> IsPinnedHostMemory(const void*) { return NoCudaStatus(); }
Result<void*> StreamCreate(int) { return NoCudaStatus(); }
void StreamDestroy(int, void*) {}
Status StreamSynchronize(int, void*) { return NoCudaStatus(); }
Status QueueDelayedFill(int, void*, int, void*, int, size_t) { return NoCudaStatus(); }
Result<int> DeviceCount() { return NoCudaStatus(); }
Result<int> CurrentDevice() { return NoCudaStatus(); }
Status SetCurrentDevice(int) { return NoCudaStatus(); }
Result<bool> ContextCurrent() { return NoCudaStatus(); }
Result<bool> PrimaryContextActive(int) { return NoCudaStatus(); }
Status CaptureBegin(int, void*) { return NoCudaStatus(); }
Status CaptureEnd(int, void*) { return NoCudaStatus(); }

}  // namespace kvtier::internal
