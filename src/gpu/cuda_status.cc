#include "gpu/cuda_status.h"

#include <cuda.h>
#include <dlfcn.h>

#include <string>

#include "gpu/cuda_handles.h"

namespace kvtier::internal {

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::OK();
  std::string msg = std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
      return Status::NotSupported("GPU path: " + msg);
    case cudaErrorMemoryAllocation:
      return Status::NoSpace(msg);
    default:
      return Status::Internal(msg);
  }
}

Status CheckDevice(int device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Clears the error so that later calls do not see it (a missing driver is not sticky).
    (void)cudaGetLastError();
    return Status::NotSupported(std::string("GPU path: no usable CUDA driver or device: ") +
                                cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
  if (count == 0) return Status::NotSupported("GPU path: no CUDA device on this machine");
  if (device < 0 || device >= count) {
    return Status::NotSupported("GPU path: device " + std::to_string(device) + " does not exist (" +
                                std::to_string(count) + " devices)");
  }
  int major = 0;
  KVTIER_CUDA_RETURN(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                     "cudaDeviceGetAttribute");
  if (major < 9) {
    return Status::NotSupported("GPU path: device " + std::to_string(device) + " has compute capability " +
                                std::to_string(major) + ".x; kvtier's kernels are built for sm_90 and later");
  }
  return Status::OK();
}

void* DriverSymbol(const char* name) {
  int devices = 0;
  // the runtime loads and initialises the driver (no context); a refusal is not left for the caller
  if (cudaGetDeviceCount(&devices) != cudaSuccess) (void)cudaGetLastError();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);  // only the driver the runtime loaded
  if (lib == nullptr) return nullptr;
  void* fn = dlsym(lib, name);
  dlclose(lib);  // drops the reference taken above; the runtime's keeps the library loaded
  return fn;
}

namespace {

// cuCtxGetCurrent / cuCtxSetCurrent of the driver the runtime loaded (kvtier links the static runtime and
// never libcuda itself). Both null when the driver is not there.
struct DriverContextCalls {
  CUresult (*get)(CUcontext*) = nullptr;
  CUresult (*set)(CUcontext) = nullptr;
};

const DriverContextCalls& DriverContext() {
  static const DriverContextCalls calls = [] {
    DriverContextCalls c;
    c.get = reinterpret_cast<CUresult (*)(CUcontext*)>(DriverSymbol("cuCtxGetCurrent"));
    c.set = reinterpret_cast<CUresult (*)(CUcontext)>(DriverSymbol("cuCtxSetCurrent"));
    if (c.get == nullptr || c.set == nullptr) c = {};
    return c;
  }();
  return calls;
}

}  // namespace

Status DeviceScope::Enter(int device) {
  Restore();
  const DriverContextCalls& drv = DriverContext();
  CUcontext ctx = nullptr;
  contexts_ = drv.get != nullptr && drv.get(&ctx) == CUDA_SUCCESS;
  prev_ctx_ = ctx;
  if (contexts_ && ctx == nullptr) {  // no context on this thread: `device`'s for the scope, then none again
    KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
    set_ = true;
    return Status::OK();
  }
  KVTIER_CUDA_RETURN(cudaGetDevice(&prev_), "cudaGetDevice");
  if (prev_ != device) {
    KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
    set_ = true;
  }
  return Status::OK();
}

void DeviceScope::Restore() {
  if (!set_) return;
  set_ = false;
  if (contexts_) {
    (void)DriverContext().set(static_cast<CUcontext>(prev_ctx_));  // the caller's context, or none
  } else {
    (void)cudaSetDevice(prev_);  // a driver without the context calls: the runtime's device
  }
}

}  // namespace kvtier::internal
