// Element-wise CUDA kernels of the decoder block, fp32 throughout, with the formulas of the CPU
// backend (backends/cpu/layers/elementwise.h): residual add, gating multiply, SiLU, GELU (tanh form),
// SwiGLU over concatenated [gate | up] rows, the column split of fused projections, and the
// bias add after a cuBLAS product. All buffers are device memory owned by the caller; outputs
// may alias an input element for element, except silu_mul and split. Launches are asynchronous
// on `stream`; errors surface through cudaGetLastError.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_activation_type.h"

namespace kiln::cuda {

// y = a + b; a, b, y: [n].
void launch_add(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream);
// y = a * b; a, b, y: [n].
void launch_mul(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream);
// y = x * sigmoid(x); x, y: [n].
void launch_silu(const float* x, int64_t n, float* y, cudaStream_t stream);
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); x, y: [n].
void launch_gelu_tanh(const float* x, int64_t n, float* y, cudaStream_t stream);
// x: [m, 2 * inter] = [gate | up] -> y: [m, inter], y = silu(gate) * up.
void launch_silu_mul(const float* x, int64_t m, int64_t inter, float* y, cudaStream_t stream);
// The same over x of 16-bit elements (bf16 when `bf16`, else fp16), widened exactly; inter % 4 == 0.
// y of y_type: fp32, or rounded for a product that reads 16-bit activations.
void launch_silu_mul_16(const void* x, bool bf16, int64_t m, int64_t inter, void* y, cudaStream_t stream,
                        ActivationType y_type = ActivationType::kF32);

// Up to kMaxSplit column ranges of x: [m, width] -> outputs[j]: [m, sizes[j]].
inline constexpr int kMaxSplit = 8;
struct SplitOutputs {
  float* out[kMaxSplit];
  int64_t size[kMaxSplit];
  int count;
};
void launch_split(const float* x, int64_t m, int64_t width, const SplitOutputs& outputs, cudaStream_t stream);

// y[i, j] += bias[j]; y: [m, n], bias: [n].
void launch_add_bias(float* y, int64_t m, int64_t n, const float* bias, cudaStream_t stream);

}  // namespace kiln::cuda
