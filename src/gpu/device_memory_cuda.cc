#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "gpu/cuda_handles.h"
#include "gpu/cuda_status.h"
#include "gpu/device_memory.h"

namespace kvtier::internal {

Result<void*> DeviceAlloc(int device, size_t bytes) {
  KVTIER_RETURN_IF_ERROR(CheckDevice(device));
  DeviceScope scope;  // the caller's device is current again on return
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  void* p = nullptr;
  KVTIER_CUDA_RETURN(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void DeviceFree(int device, void* ptr) {
  if (ptr == nullptr) return;
  DeviceScope scope;
  if (scope.Enter(device).ok()) (void)cudaFree(ptr);
}

Status DeviceMemset(int device, void* ptr, int byte, size_t bytes) {
  DeviceScope scope;  // the caller's device is current again on return
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  KVTIER_CUDA_RETURN(cudaMemset(ptr, byte, bytes), "cudaMemset");
  KVTIER_CUDA_RETURN(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return Status::OK();
}

Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) {
  DeviceScope scope;  // the caller's device is current again on return
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  KVTIER_CUDA_RETURN(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host->GPU");
  KVTIER_CUDA_RETURN(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the DMA has finished
  return Status::OK();
}

Status CopyToHost(int device, void* dst, const void* src, size_t bytes) {
  DeviceScope scope;  // the caller's device is current again on return
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  KVTIER_CUDA_RETURN(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy GPU->host");
  return Status::OK();
}

Result<void*> StreamCreate(int device) {
  KVTIER_RETURN_IF_ERROR(CheckDevice(device));
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  cudaStream_t s = nullptr;
  KVTIER_CUDA_RETURN(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return static_cast<void*>(s);
}

void StreamDestroy(int device, void* stream) {
  if (stream == nullptr) return;
  DeviceScope scope;
  if (!scope.Enter(device).ok()) return;
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

Status StreamSynchronize(int device, void* stream) {
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  KVTIER_CUDA_RETURN(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  return Status::OK();
}

namespace {
void CUDART_CB SleepHostFn(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms))); }
}  // namespace

Status QueueDelayedFill(int device, void* stream, int sleep_ms, void* ptr, int byte, size_t bytes) {
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  const auto s = static_cast<cudaStream_t>(stream);
  KVTIER_CUDA_RETURN(cudaLaunchHostFunc(s, SleepHostFn, reinterpret_cast<void*>(intptr_t{sleep_ms})),
                     "cudaLaunchHostFunc");
  KVTIER_CUDA_RETURN(cudaMemsetAsync(ptr, byte, bytes, s), "cudaMemsetAsync");
  return Status::OK();
}

Result<int> DeviceCount() {
  int n = 0;
  KVTIER_CUDA_RETURN(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  return n;
}

Result<int> CurrentDevice() {
  int d = 0;
  KVTIER_CUDA_RETURN(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

Status SetCurrentDevice(int device) {
  KVTIER_CUDA_RETURN(cudaSetDevice(device), "cudaSetDevice");
  return Status::OK();
}

namespace {
Result<void*> DriverCall(const char* name) {
  void* fn = DriverSymbol(name);
  if (fn == nullptr) return Status::NotSupported(std::string("the driver gives no ") + name);
  return fn;
}
}  // namespace

Result<bool> ContextCurrent() {
  KVTIER_ASSIGN_OR_RETURN(void* fn, DriverCall("cuCtxGetCurrent"));
  CUcontext ctx = nullptr;
  if (reinterpret_cast<CUresult (*)(CUcontext*)>(fn)(&ctx) != CUDA_SUCCESS) return Status::Internal("cuCtxGetCurrent");
  return ctx != nullptr;
}

Result<bool> PrimaryContextActive(int device) {
  KVTIER_ASSIGN_OR_RETURN(void* get, DriverCall("cuDeviceGet"));
  KVTIER_ASSIGN_OR_RETURN(void* state, DriverCall("cuDevicePrimaryCtxGetState"));
  CUdevice dev = 0;
  if (reinterpret_cast<CUresult (*)(CUdevice*, int)>(get)(&dev, device) != CUDA_SUCCESS) {
    return Status::Internal("cuDeviceGet");
  }
  unsigned flags = 0;
  int active = 0;
  if (reinterpret_cast<CUresult (*)(CUdevice, unsigned*, int*)>(state)(dev, &flags, &active) != CUDA_SUCCESS) {
    return Status::Internal("cuDevicePrimaryCtxGetState");
  }
  return active != 0;
}

Status CaptureBegin(int device, void* stream) {
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  KVTIER_CUDA_RETURN(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
                     "cudaStreamBeginCapture");
  return Status::OK();
}

Status CaptureEnd(int device, void* stream) {
  DeviceScope scope;
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
  cudaGraph_t graph = nullptr;
  KVTIER_CUDA_RETURN(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph), "cudaStreamEndCapture");
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
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
  DeviceScope scope;  // the caller's device is current again on return
  KVTIER_RETURN_IF_ERROR(scope.Enter(device));
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
