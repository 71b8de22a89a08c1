// DeviceRun: one contiguous copy the run kernel (copy_runs.cu) executes, by absolute address. Kept to
// <cstdint> so that nvcc and the host compilers share it.
#pragma once

#include <cstdint>

namespace kvtier::internal {

struct DeviceRun {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t bytes = 0;
};

}  // namespace kvtier::internal
