// The one place where CUDA runtime errors become Status values (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include "kvtier/status.h"

namespace kvtier::internal {

// OK for cudaSuccess. NotSupported for a missing driver or device, NoSpace for allocation failures,
// Internal for everything else; the message names `what` and CUDA's error text.
Status CudaStatus(cudaError_t err, const char* what);

// OK when `device` exists and runs the sm_90 kernels; NotSupported with the reason otherwise.
Status CheckDevice(int device);

// A function of the driver (libcuda.so.1, which the static runtime loads: the runtime is asked for the
// device count first, and libcuda is never opened here itself) by its name, e.g. cuCtxGetCurrent;
// nullptr when the driver is not there or lacks it. Looking it up makes no context.
void* DriverSymbol(const char* name);

}  // namespace kvtier::internal

#define KVTIER_CUDA_RETURN(expr, what)                                          \
  do {                                                                          \
    if (cudaError_t kvtier_cuda_err_ = (expr); kvtier_cuda_err_ != cudaSuccess) \
      return ::kvtier::internal::CudaStatus(kvtier_cuda_err_, what);            \
  } while (0)
