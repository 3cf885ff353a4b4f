// The fused pointwise epilogue of Conv, Gemm and MatMul (ir/epilogue.h) over f32 outputs.
#pragma once

#include <cstdint>

#include "ir/epilogue.h"

namespace kiln::cpu {

// y[i] = epilogue(y[i]) for i < n: the piecewise-linear activations in float (vectorised), the
// others (Sigmoid, Tanh, Swish, Gelu) in double, rounded once.
void apply_epilogue_f32(const ir::Epilogue& e, float* y, int64_t n);

}  // namespace kiln::cpu
