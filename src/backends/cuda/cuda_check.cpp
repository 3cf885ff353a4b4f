#include "backends/cuda/cuda_check.h"

#include <string>

namespace kiln::cuda {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  if (err == cudaErrorMemoryAllocation) {
    return resource_exhausted(std::string("GPU out of memory (") + what + ")");
  }
  return internal_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ")");
}

Status cublas_status(cublasStatus_t err, const char* what) {
  if (err == CUBLAS_STATUS_SUCCESS) return Status::ok();
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return resource_exhausted(std::string("GPU out of memory (") + what + ")");
  return internal_error(std::string("cuBLAS error in ") + what + ": " + cublasGetStatusName(err) + " (" +
                        cublasGetStatusString(err) + ")");
}

}  // namespace kiln::cuda
