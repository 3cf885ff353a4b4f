// Products over fp8 weights on Hopper's fp8 tensor cores, for prefill-sized steps:
// y[m, n] = x[m, k] · W[n, k]^T (+ bias[n]), W in f8 (ir/weight_format.h: rows of e4m3 bytes, each
// followed by the weight's one float scale s_w), x and y fp32.
//
// The activations are quantised to e4m3 with one scale for the whole step, s_x = max|x| / 448,
// found on the GPU (a max-reduction, then the conversion: no host synchronisation, so the product
// can be captured in a CUDA graph). cuBLASLt then computes s_w s_x (W_q · x_q) with fp32
// accumulation, reading both scales from device memory. Each activation carries a relative error
// of up to 2^-4 (3 mantissa bits), which averages over the k terms of a product.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace kiln::cuda {

// Whether an [n, k] f8 weight can be multiplied here: n and k multiples of 16 (what cuBLASLt's fp8
// products take).
bool gemm_fp8_fits(int64_t n, int64_t k);

// Scratch bytes launch_gemm_fp8 needs for m rows of k activations: the quantised activations,
// their scale, and cuBLASLt's workspace.
size_t gemm_fp8_scratch_bytes(int64_t m, int64_t k);

// w: [n, k] in f8, 16-byte aligned; x: [m, k]; y: [m, n] (not aliasing x); scratch as above,
// 256-byte aligned. Device buffers.
Status launch_gemm_fp8(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias, float* y,
                       void* scratch, cudaStream_t stream);

}  // namespace kiln::cuda
