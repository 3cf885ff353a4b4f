// Matrix-vector products over integer and fp8 weights (weight-only quantisation) for decode-sized
// steps: y[m, n] = x[m, k] · W[n, k]^T (+ bias[n]), W in i8c, i8g32, i8g128, i4g32, i4g128 or f8
// (ir/weight_format.h) exactly as the engine stores it for the CPU, x and y fp32, m < 8. The
// weights are widened in registers (cuda_quant.cuh) and scaled per block, so decode reads 1 or
// 0.5 bytes a weight (plus the scales) instead of 2. launch_gemv and launch_gemv_silu_mul
// (cuda_gemv.h) call these for these formats.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/gemm/cuda_gemv.h"
#include "ir/weight_format.h"

namespace kiln::cuda {

bool gemv_quant_supports(ir::WeightFormat format);

// As launch_gemv (glu = false) or launch_gemv_silu_mul (glu = true: w is [2n, k]). q8: batch-1
// steps of integer weights quantise each lane's runs of 16 activations to int8 (scale max|x| / 127,
// rounded to nearest) and multiply by dp4a: about a third of the instructions a weight of the float
// path, at a relative error of about 1/254 of each run's largest activation. Batch-1 steps of fp8
// weights scale each run by a power of two to below 1, round it to fp16 and multiply in half2,
// summing a run's 16 products in fp16: a quarter of the instructions, at a relative error of a few
// 2^-11.
void launch_gemv_quant(ir::WeightFormat format, bool glu, const float* x, int64_t m, int64_t k, const void* w,
                       int64_t n, const float* bias, float* y, cudaStream_t stream, bool q8 = false);

}  // namespace kiln::cuda
