#include "backends/cuda/gemm/cuda_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/gemm/cuda_dequant.h"
#include "backends/cuda/gemm/cuda_gemm_dq.h"
#include "backends/cuda/gemm/cuda_gemm_fp8.h"
#include "backends/cuda/gemm/cuda_gemv.h"
#include "backends/cuda/layers/cuda_elementwise.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ __half round_to(float v, __half*) { return __float2half_rn(v); }
__device__ __forceinline__ __nv_bfloat16 round_to(float v, __nv_bfloat16*) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

// x: [n] fp32 -> parts [kParts, n] of T with x ~= sum of the parts: each part rounds what the
// earlier ones left over.
template <typename T, int kParts>
__global__ void split_activations_kernel(const float* x, int64_t n, T* parts) {
  kernel_prologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float rest = x[i];
#pragma unroll
    for (int p = 0; p < kParts; ++p) {
      const T part = round_to(rest, static_cast<T*>(nullptr));
      parts[p * n + i] = part;
      rest -= widen(part);
    }
  }
}

constexpr size_t kAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

bool is_dequant(const CudaMatmulKernel& kernel) {
  return kernel.algo == CudaMatmulAlgo::kDequantSgemm || kernel.algo == CudaMatmulAlgo::kDequantGemm;
}

// gemm_fp8 over a weight whose shape cuBLASLt's fp8 products do not take runs as the fp8 format's
// gemm (the weight widened to fp16).
constexpr CudaMatmulKernel kFp8Fallback{"f8.cuda.gemm", ir::WeightFormat::kF8E4M3, CudaMatmulAlgo::kDequantGemm};

const CudaMatmulKernel& runnable(const CudaMatmulKernel& kernel, int64_t n, int64_t k) {
  return kernel.algo == CudaMatmulAlgo::kGemmFp8 && !gemm_fp8_fits(n, k) ? kFp8Fallback : kernel;
}

// The format the GEMM of a widened integer weight reads, and the bytes of the widened copy.
ir::WeightFormat widened_format(const CudaMatmulKernel& kernel) {
  return kernel.algo == CudaMatmulAlgo::kDequantGemm ? ir::WeightFormat::kF16 : ir::WeightFormat::kF32;
}
size_t widened_bytes(const CudaMatmulKernel& kernel, int64_t n, int64_t k) {
  return align_up(static_cast<size_t>(n * k) * (widened_format(kernel) == ir::WeightFormat::kF16 ? 2 : 4));
}

GemmActivations mode_of(const CudaMatmulKernel& kernel) {
  return kernel.algo == CudaMatmulAlgo::kGemmSplit || kernel.algo == CudaMatmulAlgo::kDequantSgemm
             ? GemmActivations::kSplit
             : GemmActivations::kRounded;
}

int parts_of(ir::WeightFormat format, GemmActivations mode) {
  if (format == ir::WeightFormat::kF32) return 0;
  if (mode == GemmActivations::kRounded) return 1;
  return format == ir::WeightFormat::kF16 ? 2 : 3;
}

template <typename T>
void launch_split(const float* x, int64_t n, int parts, void* out, cudaStream_t stream) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(b < 65535 * 8 ? b : 65535 * 8);
  T* o = static_cast<T*>(out);
  if (parts == 1) launch(split_activations_kernel<T, 1>, blocks, kThreads, 0, stream, x, n, o);
  if (parts == 2) launch(split_activations_kernel<T, 2>, blocks, kThreads, 0, stream, x, n, o);
  if (parts == 3) launch(split_activations_kernel<T, 3>, blocks, kThreads, 0, stream, x, n, o);
}

// The f16 / bf16 products of activations already in `parts` parts of the weights' type (xparts:
// [parts, m, k]): one GEMM a part and range of weight rows into y, fp32 or (y_16) the weights'
// type, on the handle's stream.
Status products_of_parts(cublasHandle_t handle, ir::WeightFormat format, int parts, const void* xparts, int64_t m,
                         int64_t k, const void* w, int64_t n, void* y, bool y_16, int column_parts) {
  const float one = 1.0f, zero = 0.0f;
  const int in = static_cast<int>(n), im = static_cast<int>(m), ik = static_cast<int>(k);
  const cudaDataType_t type = format == ir::WeightFormat::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  // The weight rows in column_parts consecutive ranges, one product each (the output's
  // leading dimension stays n).
  const int64_t per_part = (n + column_parts - 1) / column_parts;
  const size_t y_bytes = y_16 ? 2 : 4;
  for (int64_t c0 = 0; c0 < n; c0 += per_part) {
    const int ic = static_cast<int>(std::min(per_part, n - c0));
    const void* wc = static_cast<const std::byte*>(w) + static_cast<size_t>(c0 * k) * 2;
    void* yc = static_cast<std::byte*>(y) + static_cast<size_t>(c0) * y_bytes;
    for (int p = 0; p < parts; ++p) {
      const void* xp = static_cast<const std::byte*>(xparts) + static_cast<size_t>(p) * static_cast<size_t>(m * k) * 2;
      KILN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, ic, im, ik, &one, wc, type, ik, xp,
                                               type, ik, p == 0 ? &zero : &one, yc, y_16 ? type : CUDA_R_32F, in,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
  return Status::ok();
}

// The f16 / bf16 products: x split into `parts` of the weights' type (scratch), then one GEMM a
// part and range of weight rows into y, fp32 or (y_16) the weights' type.
Status products_16(cublasHandle_t handle, ir::WeightFormat format, int parts, const float* x, int64_t m, int64_t k,
                   const void* w, int64_t n, void* y, bool y_16, void* scratch, cudaStream_t stream,
                   int column_parts) {
  const bool half = format == ir::WeightFormat::kF16;
  if (half) {
    launch_split<__half>(x, m * k, parts, scratch, stream);
  } else {
    launch_split<__nv_bfloat16>(x, m * k, parts, scratch, stream);
  }
  KILN_CUDA_RETURN_IF_LAUNCH_FAILED("activation conversion");
  return products_of_parts(handle, format, parts, scratch, m, k, w, n, y, y_16, column_parts);
}

}  // namespace

bool gemm_supports(ir::WeightFormat format) {
  return format == ir::WeightFormat::kF32 || format == ir::WeightFormat::kF16 || format == ir::WeightFormat::kBF16;
}

size_t gemm_scratch_bytes(ir::WeightFormat format, GemmActivations mode, int64_t m, int64_t k) {
  return static_cast<size_t>(parts_of(format, mode)) * static_cast<size_t>(m * k) * 2;
}

Status launch_gemm(cublasHandle_t handle, ir::WeightFormat format, GemmActivations mode, const float* x, int64_t m,
                   int64_t k, const void* w, int64_t n, const float* bias, float* y, void* scratch,
                   cudaStream_t stream, int column_parts) {
  if (m <= 0 || n <= 0) return Status::ok();
  // Column-major view: y^T [n, m] = W [k, n]^T · x^T [k, m].
  if (format == ir::WeightFormat::kF32) {
    const float one = 1.0f, zero = 0.0f;
    const int in = static_cast<int>(n), im = static_cast<int>(m), ik = static_cast<int>(k);
    KILN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, in, im, ik, &one, w, CUDA_R_32F, ik, x,
                                             CUDA_R_32F, ik, &zero, y, CUDA_R_32F, in, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
  } else {
    KILN_RETURN_IF_ERROR(products_16(handle, format, parts_of(format, mode), x, m, k, w, n, y, /*y_16=*/false, scratch,
                                     stream, column_parts));
  }
  if (bias != nullptr) {
    launch_add_bias(y, m, n, bias, stream);
    KILN_CUDA_RETURN_IF_LAUNCH_FAILED("bias add");
  }
  return Status::ok();
}

bool gemm_16_out_supports(const CudaMatmulKernel& kernel) {
  return (kernel.algo == CudaMatmulAlgo::kGemmRounded || kernel.algo == CudaMatmulAlgo::kGemmRoundedHalves) &&
         (kernel.format == ir::WeightFormat::kF16 || kernel.format == ir::WeightFormat::kBF16);
}

Status launch_gemm_16_out(const CudaMatmulKernel& kernel, cublasHandle_t handle, const float* x, int64_t m, int64_t k,
                          const void* w, int64_t n, void* y, void* scratch, cudaStream_t stream) {
  if (!gemm_16_out_supports(kernel)) return invalid_argument(std::string(kernel.name) + " writes fp32 products");
  if (m <= 0 || n <= 0) return Status::ok();
  const int column_parts = kernel.algo == CudaMatmulAlgo::kGemmRoundedHalves ? 2 : 1;
  return products_16(handle, kernel.format, 1, x, m, k, w, n, y, /*y_16=*/true, scratch, stream, column_parts);
}

ActivationType matmul_input_type(const CudaMatmulKernel& kernel) {
  if (!gemm_16_out_supports(kernel)) return ActivationType::kF32;
  return kernel.format == ir::WeightFormat::kBF16 ? ActivationType::kBF16 : ActivationType::kF16;
}

Status launch_matmul_16_in(const CudaMatmulKernel& kernel, cublasHandle_t handle, const void* x16, int64_t m,
                           int64_t k, const void* w, int64_t n, const float* bias, void* y, bool y_16,
                           cudaStream_t stream) {
  if (matmul_input_type(kernel) == ActivationType::kF32) {
    return invalid_argument(std::string(kernel.name) + " reads fp32 activations");
  }
  if (y_16 && bias != nullptr) return invalid_argument("a 16-bit product takes no bias");
  if (m <= 0 || n <= 0) return Status::ok();
  const int column_parts = kernel.algo == CudaMatmulAlgo::kGemmRoundedHalves ? 2 : 1;
  KILN_RETURN_IF_ERROR(products_of_parts(handle, kernel.format, 1, x16, m, k, w, n, y, y_16, column_parts));
  if (bias != nullptr) {
    launch_add_bias(static_cast<float*>(y), m, n, bias, stream);
    KILN_CUDA_RETURN_IF_LAUNCH_FAILED("bias add");
  }
  return Status::ok();
}

GemvVariant gemv_variant_of(const CudaMatmulKernel& kernel) {
  switch (kernel.algo) {
    case CudaMatmulAlgo::kGemvDeep: return GemvVariant::kDeep;
    case CudaMatmulAlgo::kGemvPair: return GemvVariant::kPair;
    case CudaMatmulAlgo::kGemvQ8: return GemvVariant::kQ8;
    default: return GemvVariant::kPlain;
  }
}

size_t matmul_scratch_bytes(const CudaMatmulKernel& named, int64_t m, int64_t n, int64_t k) {
  const CudaMatmulKernel& kernel = runnable(named, n, k);
  if (cuda_matmul_kernel_is_gemv(kernel)) return 0;
  if (kernel.algo == CudaMatmulAlgo::kGemmFp8) return gemm_fp8_scratch_bytes(m, k);
  if (!is_dequant(kernel)) return gemm_scratch_bytes(kernel.format, mode_of(kernel), m, k);
  const size_t widened =
      widened_bytes(kernel, n, k) + gemm_scratch_bytes(widened_format(kernel), mode_of(kernel), m, k);
  if (kernel.algo != CudaMatmulAlgo::kDequantGemm || kernel.format == ir::WeightFormat::kF8E4M3) return widened;
  // Up to kGemmDqMaxRows rows: fp16 activations, then gemm_dq's partial sums.
  return std::max(widened, align_up(static_cast<size_t>(m * k) * 2) + gemm_dq_scratch_bytes(m, n, k));
}

Status launch_matmul(const CudaMatmulKernel& named, cublasHandle_t handle, const float* x, int64_t m, int64_t k,
                     const void* w, int64_t n, const float* bias, float* y, void* scratch, cudaStream_t stream) {
  const CudaMatmulKernel& kernel = runnable(named, n, k);
  if (cuda_matmul_kernel_is_gemv(kernel)) {
    launch_gemv(kernel.format, x, m, k, w, n, bias, y, stream, gemv_variant_of(kernel));
    KILN_CUDA_RETURN_IF_LAUNCH_FAILED("gemv");
    return Status::ok();
  }
  if (kernel.algo == CudaMatmulAlgo::kGemmFp8) return launch_gemm_fp8(x, m, k, w, n, bias, y, scratch, stream);
  const GemmActivations mode = mode_of(kernel);
  if (is_dequant(kernel)) {
    if (m <= 0 || n <= 0) return Status::ok();
    if (kernel.algo == CudaMatmulAlgo::kDequantGemm && gemm_dq_fits(kernel.format, m, k, w)) {
      // The activations rounded to fp16 into scratch, as gemm rounds them.
      launch_split<__half>(x, m * k, 1, scratch, stream);
      KILN_CUDA_RETURN_IF_LAUNCH_FAILED("activation conversion");
      void* parts = static_cast<std::byte*>(scratch) + align_up(static_cast<size_t>(m * k) * 2);
      return launch_gemm_dq(kernel.format, scratch, m, k, w, n, bias, y, parts, stream);
    }
    const ir::WeightFormat wide = widened_format(kernel);
    launch_dequantize(kernel.format, w, n, k, scratch, wide == ir::WeightFormat::kF16, stream);
    KILN_CUDA_RETURN_IF_LAUNCH_FAILED("weight dequantisation");
    void* rest = static_cast<std::byte*>(scratch) + widened_bytes(kernel, n, k);
    return launch_gemm(handle, wide, mode, x, m, k, scratch, n, bias, y, rest, stream);
  }
  const int column_parts = kernel.algo == CudaMatmulAlgo::kGemmRoundedHalves ? 2 : 1;
  return launch_gemm(handle, kernel.format, mode, x, m, k, w, n, bias, y, scratch, stream, column_parts);
}

}  // namespace kiln::cuda
