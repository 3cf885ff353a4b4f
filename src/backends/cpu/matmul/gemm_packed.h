// The f32 product of general graphs against a constant weight packed at build time
// (ir/packed_weight.h):
//
//   y[M, N] = epilogue(x[M, K] · W[K, N] + bias[N])
//
// A tile of 12 activation rows x one 32-column panel keeps its 24 accumulators in registers and
// reads the panel straight through (the float panel kernel's tiles, matmul_kernels.h). Threads
// take blocks of up to 192 rows x groups of up to 8 panels, which sweep k in chunks of 256: a
// chunk of the block's activations stays in L2 while the group's panels read it. Each output
// sums its K products in order k = 0, 1, ... whatever the thread count or the other rows of the
// call.
#pragma once

#include <cstdint>

#include "ir/epilogue.h"

namespace kiln::cpu {

// y[m, n] (row-major, stride n) = epilogue(x[m, k] (row-major, stride k) · W + bias); packed as
// ir/packed_weight.h lays it out; bias may be null. Runs on the OpenMP threads.
void gemm_packed_f32(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, const float* bias,
                     float* y, const ir::Epilogue& ep);

}  // namespace kiln::cpu
