// A tensor-core product over integer weights (i8c, i8g32, i8g128, i4g32, i4g128; ir/weight_format.h)
// that widens the weight in tiles, in registers, instead of into a whole fp16 copy first:
//   y[m, n] = x16[m, k] · W[n, k]^T (+ bias[n]),  x16 fp16, y fp32, fp32 accumulation.
// A group format's weight becomes fp16 exactly as launch_dequantize writes it (s * q, rounded to
// nearest), so the operands are those of the widen-then-cuBLAS product and only the order of the
// sums differs; i8c multiplies the integers themselves and scales each output by its row's scale
// (more exact than rounding s * q to fp16). It reads each weight byte once from memory, where
// widening first reads it, writes twice its bytes and reads those again: the win is largest for
// the products of few rows (batched decode, short prompts), which stream the weight. Larger
// products are compute bound and run faster through cuBLAS (gemm_dq_fits: at most kGemmDqMaxRows
// rows): the integer formats' gemm kernel (cuda_matmul.h) takes this path up to there.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "base/status.h"
#include "ir/weight_format.h"

namespace kiln::cuda {

inline constexpr int64_t kGemmDqMaxRows = 64;

// Whether the kernel takes this product: an integer format, m <= kGemmDqMaxRows, k a multiple of
// 128 that the format's vector reads take, w 4-byte aligned.
bool gemm_dq_fits(ir::WeightFormat format, int64_t m, int64_t k, const void* w);

// Scratch bytes for the partial sums: products of few tiles split k over several blocks, each
// writing its own partial product, added in order by a second kernel (the same bits every run).
size_t gemm_dq_scratch_bytes(int64_t m, int64_t n, int64_t k);

// x16, w, bias (may be null), y and scratch (gemm_dq_scratch_bytes; may be null when that is 0,
// and then k is not split) are device memory; y must not alias x16.
Status launch_gemm_dq(ir::WeightFormat format, const void* x16, int64_t m, int64_t k, const void* w, int64_t n,
                      const float* bias, float* y, void* scratch, cudaStream_t stream);

}  // namespace kiln::cuda
