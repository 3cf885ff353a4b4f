// Internal to the CPU matmul: the kernel tables each ISA file contributes to the registry in
// matmul.cpp. Not for use outside src/backends/cpu.
#pragma once

#include <span>

#include "backends/cpu/matmul/matmul.h"

namespace kiln::cpu::detail {

std::span<const MatmulKernel> matmul_kernels_scalar();
std::span<const MatmulKernel> matmul_kernels_avx2_float();   // matmul_avx2.cpp
std::span<const MatmulKernel> matmul_kernels_avx2_q8dot();   // matmul_q8dot_avx2.cpp
std::span<const MatmulKernel> matmul_kernels_avx2_panel();   // matmul_panel_avx2.cpp
std::span<const MatmulKernel> matmul_kernels_avx512_float();  // matmul_avx512.cpp
std::span<const MatmulKernel> matmul_kernels_avx512_panel();  // matmul_panel_avx512.cpp
std::span<const MatmulKernel> matmul_kernels_avx512bf16();    // matmul_bf16dot_avx512.cpp

// Cache lines (kLineFloats floats each, from `first`) that a call should ask the cache for while
// it computes: the weights the caller reads next. Only a request; results never depend on it.
struct PrefetchLines {
  static constexpr int64_t kLineFloats = 16;  // a 64-byte line
  const float* first = nullptr;
  int64_t lines = 0;
};

// Part `t` of `parts` of p's lines, in order: the row tiles of one chunk share its prefetches.
inline PrefetchLines prefetch_share(PrefetchLines p, int64_t t, int64_t parts) {
  const int64_t l0 = p.lines * t / parts;
  return p.first == nullptr ? PrefetchLines{}
                            : PrefetchLines{p.first + PrefetchLines::kLineFloats * l0, p.lines * (t + 1) / parts - l0};
}

// y[0:rows, 0:cols] = (y if accumulate, else 0) + x[0:rows, 0:k] · wf (+ bias[0:cols]), cols <= 32,
// each output one FMA chain over k continuing from y's value, where wf holds k rows of
// 32 floats (one column position of 32 output columns): the float panel kernel's register tiles
// (AVX-512: 12 x 32 broadcast-FMAs; AVX2: 6 x 16) over an already float panel. The AVX-512 tiles
// issue one `prefetch` line a column position (at most k of them); the others ignore it.
void float_panel_rows_avx512(const float* x, int64_t ldx, int64_t rows, const float* wf, int64_t k, float* y,
                             int64_t ldy, int cols, const float* bias, bool accumulate,
                             PrefetchLines prefetch);  // matmul_panel_avx512.cpp
void float_panel_rows_avx2(const float* x, int64_t ldx, int64_t rows, const float* wf, int64_t k, float* y,
                           int64_t ldy, int cols, const float* bias, bool accumulate,
                           PrefetchLines prefetch);  // matmul_panel_avx2.cpp
// The same sums without SIMD intrinsics, one row at a time (gemm_packed.cpp).
void float_panel_rows_portable(const float* x, int64_t ldx, int64_t rows, const float* wf, int64_t k, float* y,
                               int64_t ldy, int cols, const float* bias, bool accumulate, PrefetchLines prefetch);
using FloatPanelRowsFn = void (*)(const float* x, int64_t ldx, int64_t rows, const float* wf, int64_t k, float* y,
                                  int64_t ldy, int cols, const float* bias, bool accumulate, PrefetchLines prefetch);
// The widest of the three that `isa` runs.
FloatPanelRowsFn float_panel_rows_fn(Isa isa);

// The AVX2 kernel of a panel format: the AVX-512 panel kernels hand decode-sized calls, which
// are memory bound, to it.
MatmulFn matmul_avx2_panel_fn(ir::WeightFormat format);

}  // namespace kiln::cpu::detail
