// The packed layout of a general graph's constant MatMul weight W [K, N] (f32), the contract
// between the build (passes/pack_matmul_weights.cpp writes it) and the CPU kernel
// (backends/cpu/matmul/gemm_packed.h reads it): ceil(N / 32) panels of K rows of 32 floats, panel p
// row k holding W[k, 32p .. 32p + 31], the columns past N zero. Stored as a weight of shape
// [ceil(N / 32), K, 32]; the MatMul node carries kiln.b_packed = N.
#pragma once

#include <cstdint>

namespace kiln::ir {

inline constexpr int64_t kPackedPanel = 32;  // output columns a panel holds

inline int64_t packed_panels(int64_t n) { return (n + kPackedPanel - 1) / kPackedPanel; }

// Packs wt ([N, K] rows: W transposed) into dst (packed_panels(n) * k * 32 floats).
void pack_weight_rows(const float* wt, int64_t n, int64_t k, float* dst);

}  // namespace kiln::ir
