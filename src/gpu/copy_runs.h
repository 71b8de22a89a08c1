// The one kernel of the GPU path: executes a list of DeviceRuns (scatter on load, gather on save).
// CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/device_run.h"

namespace kvtier::internal {

// Queues one thread block per run on `stream`; `runs` is in device memory and must stay there until
// the kernel has run. Returns the launch error (cudaSuccess when queued).
cudaError_t LaunchCopyRuns(const DeviceRun* runs, uint32_t count, cudaStream_t stream);

}  // namespace kvtier::internal
