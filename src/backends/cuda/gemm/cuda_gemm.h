// Matrix products for prefill-sized steps through cuBLAS: y[m, n] = x[m, k] · W[n, k]^T
// (+ bias[n]), W in a float row format, x and y fp32, fp32 accumulation.
//   f32 weights: SGEMM on the fp32 activations (no TF32).
//   f16 / bf16 weights, GemmActivations::kRounded: x is rounded to the weights' type and one
//     tensor-core GEMM runs (relative error about 2^-11 (fp16) or 2^-8 (bf16) per activation).
//   f16 / bf16 weights, GemmActivations::kSplit: x is written as a sum of 2 (fp16) or 3 (bf16)
//     parts of the weights' type, each part a tensor-core GEMM accumulating into y: the
//     products of fp32 activations to within fp32 rounding, at 2-3x the arithmetic.
// column_parts > 1 issues one product per range of weight rows (cuBLAS's choice for some widths,
// such as the 12288 rows of a 7B model's fused q/k/v product, runs far below the others' rate).
// The conversion needs scratch device memory (gemm_scratch_bytes); the caller owns it, x, w,
// bias and y (y must not alias x), and the cuBLAS handle (bound to `stream`, with its own
// workspace, so that calls can be captured into a CUDA graph).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/cuda_activation_type.h"
#include "backends/cuda/gemm/cuda_gemv.h"
#include "backends/cuda/gemm/cuda_matmul.h"
#include "base/status.h"
#include "ir/weight_format.h"

namespace kiln::cuda {

enum class GemmActivations { kSplit, kRounded };

bool gemm_supports(ir::WeightFormat format);

// Scratch bytes launch_gemm needs for m rows of k activations.
size_t gemm_scratch_bytes(ir::WeightFormat format, GemmActivations mode, int64_t m, int64_t k);

Status launch_gemm(cublasHandle_t handle, ir::WeightFormat format, GemmActivations mode, const float* x, int64_t m,
                   int64_t k, const void* w, int64_t n, const float* bias, float* y, void* scratch,
                   cudaStream_t stream, int column_parts = 1);

// Whether `kernel` can write its products in the weights' 16-bit type (the rounded f16 / bf16
// GEMMs), and that product: y [m, n] of fp16 or bf16 elements, no bias; scratch as launch_matmul's.
// Half the bytes of an fp32 output, for a consumer that widens it as it reads (SwiGLU).
bool gemm_16_out_supports(const CudaMatmulKernel& kernel);
Status launch_gemm_16_out(const CudaMatmulKernel& kernel, cublasHandle_t handle, const float* x, int64_t m, int64_t k,
                          const void* w, int64_t n, void* y, void* scratch, cudaStream_t stream);

// The activation type `kernel` rounds its input to before its product (fp16 or bf16 for the
// rounded f16 / bf16 GEMMs), or kF32 when it reads fp32 activations (or rounds them otherwise).
ActivationType matmul_input_type(const CudaMatmulKernel& kernel);

// The product of such a kernel over activations already rounded to that type (x16: [m, k], as the
// producing kernel wrote them: no conversion pass, no scratch): y fp32 (+ bias) or (y_16, no bias)
// the weights' type. The same results as launch_matmul / launch_gemm_16_out over the fp32 values.
Status launch_matmul_16_in(const CudaMatmulKernel& kernel, cublasHandle_t handle, const void* x16, int64_t m,
                           int64_t k, const void* w, int64_t n, const float* bias, void* y, bool y_16,
                           cudaStream_t stream);

// The gemv kernel (cuda_gemv.h) behind a matrix-vector matmul kernel.
GemvVariant gemv_variant_of(const CudaMatmulKernel& kernel);

// Scratch bytes launch_matmul needs to run `kernel` over m rows against an [n, k] weight: the
// activation conversion, and for the integer formats the widened weight before it.
size_t matmul_scratch_bytes(const CudaMatmulKernel& kernel, int64_t m, int64_t n, int64_t k);

// Runs a named matmul kernel (cuda_matmul.h): the gemv kernel, launch_gemm in its mode, (integer
// and fp8 weights) the weight widened into scratch and then launch_gemm over it, or (gemm_fp8)
// launch_gemm_fp8 (cuda_gemm_fp8.h; a weight of a shape it does not take, as the fp8 gemm). scratch holds
// matmul_scratch_bytes(kernel, m, n, k) bytes.
Status launch_matmul(const CudaMatmulKernel& kernel, cublasHandle_t handle, const float* x, int64_t m, int64_t k,
                     const void* w, int64_t n, const float* bias, float* y, void* scratch, cudaStream_t stream);

}  // namespace kiln::cuda
