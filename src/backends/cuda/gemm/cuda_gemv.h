// Matrix-vector products for decode-sized steps: y[m, n] = x[m, k] · W[n, k]^T (+ bias[n]) for
// m < kGemvMaxRows, W in a float row format (f32, f16, bf16; ir/weight_format.h), x and y fp32
// (the integer formats go to cuda_gemv_quant.h).
// Decode reads every weight once per token, so this kernel is what bounds decode speed: one
// warp per weight row streams it with 16-byte loads that skip L1, four in flight per lane (eight
// for batch-1 steps of the gemv_deep kernels; two warps a row, each with four, for gemv_pair),
// widens to fp32 in registers and keeps the activations in fp32 (exact products; only the
// summation order differs from the CPU). Device buffers owned by the caller; y must not alias x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ir/weight_format.h"

namespace kiln::cuda {

inline constexpr int64_t kGemvMaxRows = 8;  // m < this

bool gemv_supports(ir::WeightFormat format);

// Which kernel a product takes (the matmul kernels of cuda_matmul.h):
//   kPlain  "gemv": four 16-byte loads in flight per lane; fp32 activations;
//   kDeep   "gemv_deep": eight, for batch-1 steps of f16/bf16 weights;
//   kPair   "gemv_pair": two warps a weight row, each taking every other run of 32 loads, their
//           sums added in shared memory: twice the loads in flight for products of few rows
//           (batch-1 steps of f16/bf16 weights);
//   kQ8     "gemv_q8" (integer weights) and "gemv_h2" (fp8): batch-1 steps over runs of 16
//           activations quantised to int8, or scaled and rounded to fp16 (cuda_gemv_quant.h);
//           other steps and formats as kPlain.
enum class GemvVariant { kPlain, kDeep, kPair, kQ8 };

// x: [m, k]; w: [n, k] in `format`; bias: [n] or nullptr; y: [m, n]. 1 <= m < kGemvMaxRows.
void launch_gemv(ir::WeightFormat format, const float* x, int64_t m, int64_t k, const void* w, int64_t n,
                 const float* bias, float* y, cudaStream_t stream, GemvVariant variant = GemvVariant::kPlain);

// SwiGLU in the product's epilogue: w: [2n, k] = [gate rows | up rows], bias: [2n] or nullptr,
// y: [m, n] = silu(x · gate^T + bias_gate) * (x · up^T + bias_up), as launch_gemv followed by
// launch_silu_mul computes it, without the [m, 2n] intermediate or the second launch.
void launch_gemv_silu_mul(ir::WeightFormat format, const float* x, int64_t m, int64_t k, const void* w, int64_t n,
                          const float* bias, float* y, cudaStream_t stream,
                          GemvVariant variant = GemvVariant::kPlain);

}  // namespace kiln::cuda
