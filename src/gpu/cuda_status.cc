#include "gpu/cuda_status.h"

#include <string>

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

}  // namespace kvtier::internal
