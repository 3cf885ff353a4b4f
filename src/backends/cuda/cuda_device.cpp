#include "backends/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/cuda_check.h"

namespace kiln::cuda {

Expected<CudaDeviceInfo> cuda_device_info(int index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error for later calls
    return not_found(std::string("no CUDA GPU found") +
                     (err != cudaSuccess ? std::string(" (") + cudaGetErrorString(err) + ")" : std::string()));
  }
  if (index < 0 || index >= count) {
    return invalid_argument("GPU " + std::to_string(index) + " does not exist (found " + std::to_string(count) + ")");
  }
  cudaDeviceProp prop{};
  KILN_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, index));
  CudaDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  return info;
}

Status cuda_device_supported(const CudaDeviceInfo& device) {
  if (device.sm_major == 9 && device.sm_minor == 0) return Status::ok();
  return unimplemented("GPU " + std::to_string(device.index) + " (" + device.name + ") is " + device.target() +
                       "; this kiln's CUDA kernels are built for Hopper (" + kCudaTarget + ") only");
}

Expected<CudaMemoryInfo> cuda_memory_info(int index) {
  KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  CudaMemoryInfo info;
  KILN_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&info.free, &info.total));
  return info;
}

Expected<double> cuda_measure_copy_bandwidth(int index) {
  KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  constexpr size_t kBytes = size_t{1} << 30;
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto release = [&] {
    cudaFree(a);
    cudaFree(b);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  };
  Status st = [&]() -> Status {
    KILN_CUDA_RETURN_IF_ERROR(cudaMalloc(&a, kBytes));
    KILN_CUDA_RETURN_IF_ERROR(cudaMalloc(&b, kBytes));
    KILN_CUDA_RETURN_IF_ERROR(cudaMemset(a, 1, kBytes));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
    return Status::ok();
  }();
  double best = 0.0;
  for (int i = 0; st && i < 8; ++i) {
    st = [&]() -> Status {
      KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(start));
      KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(b, a, kBytes, cudaMemcpyDeviceToDevice));
      KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop));
      KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float ms = 0.0f;
      KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
      if (i > 0) best = std::max(best, 2.0 * static_cast<double>(kBytes) / (static_cast<double>(ms) * 1e-3));
      return Status::ok();
    }();
  }
  release();
  if (!st) return st;
  return best;
}

}  // namespace kiln::cuda
