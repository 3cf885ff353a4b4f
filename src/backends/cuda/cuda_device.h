// The GPU the CUDA backend runs on: which one there is, its name and architecture, and whether
// this kiln's kernels (compiled for Hopper, sm_90a) can run on it. Plain C++: `kiln build`
// and the CLI use it without seeing CUDA types.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace kiln::cuda {

// The target every CUDA engine of this kiln records: its kernels are sm_90a machine code.
inline constexpr const char* kCudaTarget = "cuda-sm90";

struct CudaDeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H200"
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0;  // bytes
  // "cuda-sm90" for compute capability 9.0.
  std::string target() const { return "cuda-sm" + std::to_string(sm_major * 10 + sm_minor); }
};

// GPU `index`, or an error saying why there is none (no driver, no device).
Expected<CudaDeviceInfo> cuda_device_info(int index = 0);

// Ok when this kiln's kernels run on `device` (compute capability 9.0), else a message saying so.
Status cuda_device_supported(const CudaDeviceInfo& device);

// Free and total device memory of GPU `index` in bytes, as the driver reports them now.
struct CudaMemoryInfo {
  size_t free = 0, total = 0;
};
Expected<CudaMemoryInfo> cuda_memory_info(int index = 0);

// Device-to-device copy bandwidth of GPU `index` in bytes/s, counting bytes read and written
// (a 1 GiB copy, best of several): the ceiling for decode, which streams the weights once.
Expected<double> cuda_measure_copy_bandwidth(int index = 0);

}  // namespace kiln::cuda
