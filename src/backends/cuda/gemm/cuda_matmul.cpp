#include "backends/cuda/gemm/cuda_matmul.h"

#include "backends/cuda/gemm/cuda_gemv.h"

namespace kiln::cuda {
namespace {

using F = ir::WeightFormat;
using A = CudaMatmulAlgo;

constexpr CudaMatmulKernel kKernels[] = {
    {"f32.cuda.gemv", F::kF32, A::kGemv},
    {"f32.cuda.sgemm", F::kF32, A::kGemmSplit},
    {"f16.cuda.gemv", F::kF16, A::kGemv},
    {"f16.cuda.gemv_deep", F::kF16, A::kGemvDeep},
    {"f16.cuda.gemv_pair", F::kF16, A::kGemvPair},
    {"f16.cuda.gemm_split", F::kF16, A::kGemmSplit},
    {"f16.cuda.gemm", F::kF16, A::kGemmRounded},
    {"f16.cuda.gemm_halves", F::kF16, A::kGemmRoundedHalves},
    {"bf16.cuda.gemv", F::kBF16, A::kGemv},
    {"bf16.cuda.gemv_deep", F::kBF16, A::kGemvDeep},
    {"bf16.cuda.gemv_pair", F::kBF16, A::kGemvPair},
    {"bf16.cuda.gemm_split", F::kBF16, A::kGemmSplit},
    {"bf16.cuda.gemm", F::kBF16, A::kGemmRounded},
    {"bf16.cuda.gemm_halves", F::kBF16, A::kGemmRoundedHalves},
    {"i8c.cuda.gemv", F::kI8Channel, A::kGemv},
    {"i8c.cuda.gemv_q8", F::kI8Channel, A::kGemvQ8},
    {"i8c.cuda.sgemm", F::kI8Channel, A::kDequantSgemm},
    {"i8c.cuda.gemm", F::kI8Channel, A::kDequantGemm},
    {"i8g32.cuda.gemv", F::kI8Group32, A::kGemv},
    {"i8g32.cuda.gemv_q8", F::kI8Group32, A::kGemvQ8},
    {"i8g32.cuda.sgemm", F::kI8Group32, A::kDequantSgemm},
    {"i8g32.cuda.gemm", F::kI8Group32, A::kDequantGemm},
    {"i8g128.cuda.gemv", F::kI8Group128, A::kGemv},
    {"i8g128.cuda.gemv_q8", F::kI8Group128, A::kGemvQ8},
    {"i8g128.cuda.sgemm", F::kI8Group128, A::kDequantSgemm},
    {"i8g128.cuda.gemm", F::kI8Group128, A::kDequantGemm},
    {"i4g32.cuda.gemv", F::kI4Group32, A::kGemv},
    {"i4g32.cuda.gemv_q8", F::kI4Group32, A::kGemvQ8},
    {"i4g32.cuda.sgemm", F::kI4Group32, A::kDequantSgemm},
    {"i4g32.cuda.gemm", F::kI4Group32, A::kDequantGemm},
    {"i4g128.cuda.gemv", F::kI4Group128, A::kGemv},
    {"i4g128.cuda.gemv_q8", F::kI4Group128, A::kGemvQ8},
    {"i4g128.cuda.sgemm", F::kI4Group128, A::kDequantSgemm},
    {"i4g128.cuda.gemm", F::kI4Group128, A::kDequantGemm},
    {"f8.cuda.gemv", F::kF8E4M3, A::kGemv},
    {"f8.cuda.gemv_h2", F::kF8E4M3, A::kGemvQ8},
    {"f8.cuda.sgemm", F::kF8E4M3, A::kDequantSgemm},
    {"f8.cuda.gemm", F::kF8E4M3, A::kDequantGemm},
    {"f8.cuda.gemm_fp8", F::kF8E4M3, A::kGemmFp8},
};

}  // namespace

std::vector<const CudaMatmulKernel*> cuda_matmul_kernels(ir::WeightFormat format, int64_t m) {
  std::vector<const CudaMatmulKernel*> out;
  for (const CudaMatmulKernel& k : kKernels) {
    if (k.format == format && cuda_matmul_kernel_fits(k, m) && cuda_matmul_kernel_is_gemv(k) == (m < kGemvMaxRows)) {
      out.push_back(&k);
    }
  }
  return out;
}

const CudaMatmulKernel* cuda_matmul_kernel_find(std::string_view name) {
  for (const CudaMatmulKernel& k : kKernels) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

bool cuda_matmul_kernel_is_gemv(const CudaMatmulKernel& kernel) {
  return kernel.algo == A::kGemv || kernel.algo == A::kGemvDeep || kernel.algo == A::kGemvPair ||
         kernel.algo == A::kGemvQ8;
}

bool cuda_matmul_kernel_rounds_activations(const CudaMatmulKernel& kernel) {
  return kernel.algo == A::kGemmRounded || kernel.algo == A::kGemmRoundedHalves || kernel.algo == A::kDequantGemm ||
         kernel.algo == A::kGemmFp8;
}

bool cuda_matmul_kernel_fits(const CudaMatmulKernel& kernel, int64_t m) {
  return !cuda_matmul_kernel_is_gemv(kernel) || m < kGemvMaxRows;
}

}  // namespace kiln::cuda
