#include "gpu/copy_runs.h"

namespace kvtier::internal {
namespace {

constexpr unsigned kThreads = 256;

// One block per run. Rows are whole tokens of kv_heads x head_dim values, so in every shape an engine
// uses both ends and the length are 16-byte multiples and the copy moves int4s; the byte loop covers
// odd shapes (e.g. fp8 with 8 values a row).
__global__ void CopyRunsKernel(const DeviceRun* runs) {
  const DeviceRun r = runs[blockIdx.x];
  if (((r.src | r.dst | r.bytes) & 15u) == 0) {
    const int4* src = reinterpret_cast<const int4*>(r.src);
    int4* dst = reinterpret_cast<int4*>(r.dst);
    const uint64_t n = r.bytes / 16;
    for (uint64_t i = threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
  } else {
    const unsigned char* src = reinterpret_cast<const unsigned char*>(r.src);
    unsigned char* dst = reinterpret_cast<unsigned char*>(r.dst);
    for (uint64_t i = threadIdx.x; i < r.bytes; i += kThreads) dst[i] = src[i];
  }
}

}  // namespace

cudaError_t LaunchCopyRuns(const DeviceRun* runs, uint32_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  // gridDim.x takes up to 2^31 - 1 blocks; a batch has far fewer runs (chunks x 2 x layers x blocks).
  CopyRunsKernel<<<count, kThreads, 0, stream>>>(runs);
  return cudaGetLastError();
}

}  // namespace kvtier::internal
