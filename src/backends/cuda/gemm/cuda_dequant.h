// Widening a whole integer or fp8 weight (i8c, i8g32, i8g128, i4g32, i4g128, f8; ir/weight_format.h) on the
// GPU into fp16 or fp32 rows, for products too large for the GEMV (prefill, batched decode):
// the matmul then runs as a cuBLAS GEMM over the widened copy (cuda_gemm.h). fp32 holds s * q
// exactly; fp16 rounds it to nearest.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ir/weight_format.h"

namespace kiln::cuda {

// w: [n, k] in `format` (one of the integer formats above; others write nothing); out: [n, k] of
// __half (to_half) or float. Device buffers.
void launch_dequantize(ir::WeightFormat format, const void* w, int64_t n, int64_t k, void* out, bool to_half,
                       cudaStream_t stream);

}  // namespace kiln::cuda
