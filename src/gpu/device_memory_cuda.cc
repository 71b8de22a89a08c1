#include <cuda_runtime_api.h>

#include "gpu/cuda_handles.h"
#include "gpu/cuda_status.h"
#include "gpu/device_memory.h"

namespace kvtier::internal {

Result<void*> DeviceAlloc(int device, size_t bytes) {
  KVTIER_RETURN_IF_ERROR(CheckDevice(device));
  KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  KVTIER_CUDA_RETURN(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void DeviceFree(int device, void* ptr) {
  if (ptr == nullptr) return;
  (void)cudaSetDevice(device);
  (void)cudaFree(ptr);
}

Status DeviceMemset(int device, void* ptr, int byte, size_t bytes) {
  KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
  KVTIER_CUDA_RETURN(cudaMemset(ptr, byte, bytes), "cudaMemset");
  KVTIER_CUDA_RETURN(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return Status::OK();
}

Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) {
  KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
  KVTIER_CUDA_RETURN(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host->GPU");
  return Status::OK();
}

Status CopyToHost(int device, void* dst, const void* src, size_t bytes) {
  KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
  KVTIER_CUDA_RETURN(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy GPU->host");
  return Status::OK();
}

Result<bool> IsPinnedHostMemory(const void* host) {
  KVTIER_RETURN_IF_ERROR(CheckDevice(0));
  cudaPointerAttributes attr{};
  KVTIER_CUDA_RETURN(cudaPointerGetAttributes(&attr, host), "cudaPointerGetAttributes");
  return attr.type == cudaMemoryTypeHost;
}

Result<double> TimedHostToDevice(int device, const void* host, size_t piece, uint64_t total) {
  KVTIER_RETURN_IF_ERROR(CheckDevice(device));
  KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
  DeviceBuffer dst;
  KVTIER_RETURN_IF_ERROR(dst.Allocate(piece));
  Stream stream;
  KVTIER_RETURN_IF_ERROR(stream.Create());
  cudaEvent_t start = nullptr, stop = nullptr;
  KVTIER_CUDA_RETURN(cudaEventCreate(&start), "cudaEventCreate");
  KVTIER_CUDA_RETURN(cudaEventCreate(&stop), "cudaEventCreate");
  uint64_t moved = 0;
  cudaError_t err = cudaEventRecord(start, stream.get());
  while (err == cudaSuccess && moved < total) {
    err = cudaMemcpyAsync(dst.data(), host, piece, cudaMemcpyHostToDevice, stream.get());
    moved += piece;
  }
  if (err == cudaSuccess) err = cudaEventRecord(stop, stream.get());
  if (err == cudaSuccess) err = cudaEventSynchronize(stop);
  float ms = 0;
  if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  KVTIER_CUDA_RETURN(err, "timed host->GPU copies");
  return ms > 0 ? static_cast<double>(moved) / (ms * 1e6) : 0.0;
}

}  // namespace kvtier::internal
