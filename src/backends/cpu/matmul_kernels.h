// Internal to the CPU matmul: the kernel tables each ISA file contributes to the registry in
// matmul.cpp. Not for use outside src/backends/cpu.
#pragma once

#include <span>

#include "backends/cpu/matmul.h"

namespace kiln::cpu::detail {

std::span<const MatmulKernel> matmul_kernels_scalar();
std::span<const MatmulKernel> matmul_kernels_avx2_float();   // matmul_avx2.cpp
std::span<const MatmulKernel> matmul_kernels_avx2_q8dot();   // matmul_q8dot_avx2.cpp
std::span<const MatmulKernel> matmul_kernels_avx2_panel();   // matmul_panel_avx2.cpp
std::span<const MatmulKernel> matmul_kernels_avx512_float();  // matmul_avx512.cpp
std::span<const MatmulKernel> matmul_kernels_avx512_panel();  // matmul_panel_avx512.cpp
std::span<const MatmulKernel> matmul_kernels_avx512bf16();    // matmul_bf16dot_avx512.cpp

// The AVX2 kernel of a panel format: the AVX-512 panel kernels hand decode-sized calls, which
// are memory bound, to it.
MatmulFn matmul_avx2_panel_fn(ir::WeightFormat format);

}  // namespace kiln::cpu::detail
