// Error handling for the CUDA backend's own files: CUDA runtime and cuBLAS return codes become
// Status (a GPU that fails or runs out of memory is something from outside), and every kernel
// launch is followed by a check of the launch error. Internal to backends/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "base/status.h"

namespace kiln::cuda {

// Ok for cudaSuccess, else an internal error naming `what` and CUDA's description.
Status cuda_status(cudaError_t err, const char* what);
Status cublas_status(cublasStatus_t err, const char* what);

}  // namespace kiln::cuda

#define KILN_CUDA_RETURN_IF_ERROR(expr) KILN_RETURN_IF_ERROR(::kiln::cuda::cuda_status((expr), #expr))
#define KILN_CUBLAS_RETURN_IF_ERROR(expr) KILN_RETURN_IF_ERROR(::kiln::cuda::cublas_status((expr), #expr))
// After a kernel launch: the launch configuration's error, if any.
#define KILN_CUDA_RETURN_IF_LAUNCH_FAILED(what) \
  KILN_RETURN_IF_ERROR(::kiln::cuda::cuda_status(cudaGetLastError(), what))
