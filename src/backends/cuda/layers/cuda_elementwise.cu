#include "backends/cuda/layers/cuda_elementwise.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/cuda_vec.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  // A grid-stride loop covers the rest: a few waves of blocks keep every SM busy.
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }

// op 0: a + b, op 1: a * b.
template <int kOp>
__global__ void binary_kernel(const float* a, const float* b, int64_t n, float* y) {
  kernel_prologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = kOp == 0 ? a[i] + b[i] : a[i] * b[i];
  }
}

// op 0: silu, op 1: gelu_tanh.
template <int kOp>
__global__ void activation_kernel(const float* x, int64_t n, float* y) {
  kernel_prologue();
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    if (kOp == 0) {
      y[i] = silu_f(v);
    } else {
      const float inner = kSqrt2OverPi * (v + kCubic * (v * v * v));
      y[i] = (0.5f * v) * (1.0f + tanhf(inner));
    }
  }
}

// x: [m, 2 * inter], y: [m, inter].
__global__ void silu_mul_kernel(const float* x, int64_t m, int64_t inter, float* y) {
  kernel_prologue();
  const int64_t n = m * inter;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / inter, c = i - r * inter;
    const float* row = x + r * 2 * inter;
    y[i] = silu_f(row[c]) * row[c + inter];
  }
}

// silu_mul_kernel four columns a thread (inter % 4 == 0), rows strided over the grid's second
// dimension (no division per element), over float or 16-bit [gate | up] rows.
template <typename T, typename Out>
__global__ void silu_mul4_kernel(const T* x, int64_t m, int64_t inter, Out* y) {
  kernel_prologue();
  const int64_t c = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * 4;
  if (c >= inter) return;
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    const T* row = x + r * 2 * inter + c;
    const float4 gate = load4(row);
    const float4 up = load4(row + inter);
    store4(y + r * inter + c,
           make_float4(silu_f(gate.x) * up.x, silu_f(gate.y) * up.y, silu_f(gate.z) * up.z, silu_f(gate.w) * up.w));
  }
}

dim3 silu_mul4_grid(int64_t m, int64_t inter) {
  return dim3(static_cast<unsigned>((inter / 4 + kThreads - 1) / kThreads),
              static_cast<unsigned>(std::min<int64_t>(m, 65535)));
}

// x: [m, width]; every element goes to the output whose column range holds it.
__global__ void split_kernel(const float* x, int64_t m, int64_t width, SplitOutputs outs) {
  kernel_prologue();
  const int64_t n = m * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / width;
    int64_t c = i - r * width;
    int j = 0;
    while (c >= outs.size[j]) c -= outs.size[j++];
    outs.out[j][r * outs.size[j] + c] = x[i];
  }
}

// y: [m, n] += bias[n].
__global__ void add_bias_kernel(float* y, int64_t m, int64_t n, const float* bias) {
  kernel_prologue();
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bias[i % n];
  }
}

template <typename T>
void launch_silu_mul4(const void* x, int64_t m, int64_t inter, void* y, ActivationType y_type, cudaStream_t stream) {
  const auto* xt = static_cast<const T*>(x);
  const dim3 grid = silu_mul4_grid(m, inter);
  switch (y_type) {
    case ActivationType::kF32:
      launch(silu_mul4_kernel<T, float>, grid, kThreads, 0, stream, xt, m, inter, static_cast<float*>(y));
      break;
    case ActivationType::kF16:
      launch(silu_mul4_kernel<T, __half>, grid, kThreads, 0, stream, xt, m, inter, static_cast<__half*>(y));
      break;
    case ActivationType::kBF16:
      launch(silu_mul4_kernel<T, __nv_bfloat16>, grid, kThreads, 0, stream, xt, m, inter,
             static_cast<__nv_bfloat16*>(y));
      break;
  }
}

}  // namespace

void launch_add(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream) {
  if (n > 0) launch(binary_kernel<0>, blocks_for(n), kThreads, 0, stream, a, b, n, y);
}

void launch_mul(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream) {
  if (n > 0) launch(binary_kernel<1>, blocks_for(n), kThreads, 0, stream, a, b, n, y);
}

void launch_silu(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n > 0) launch(activation_kernel<0>, blocks_for(n), kThreads, 0, stream, x, n, y);
}

void launch_gelu_tanh(const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (n > 0) launch(activation_kernel<1>, blocks_for(n), kThreads, 0, stream, x, n, y);
}

void launch_silu_mul(const float* x, int64_t m, int64_t inter, float* y, cudaStream_t stream) {
  if (m * inter <= 0) return;
  if (inter % 4 == 0) {
    launch(silu_mul4_kernel<float, float>, silu_mul4_grid(m, inter), kThreads, 0, stream, x, m, inter, y);
  } else {
    launch(silu_mul_kernel, blocks_for(m * inter), kThreads, 0, stream, x, m, inter, y);
  }
}

void launch_silu_mul_16(const void* x, bool bf16, int64_t m, int64_t inter, void* y, cudaStream_t stream,
                        ActivationType y_type) {
  if (m * inter <= 0) return;
  if (bf16) {
    launch_silu_mul4<__nv_bfloat16>(x, m, inter, y, y_type, stream);
  } else {
    launch_silu_mul4<__half>(x, m, inter, y, y_type, stream);
  }
}

void launch_split(const float* x, int64_t m, int64_t width, const SplitOutputs& outputs, cudaStream_t stream) {
  if (m * width > 0) launch(split_kernel, blocks_for(m * width), kThreads, 0, stream, x, m, width, outputs);
}

void launch_add_bias(float* y, int64_t m, int64_t n, const float* bias, cudaStream_t stream) {
  if (m * n > 0) launch(add_bias_kernel, blocks_for(m * n), kThreads, 0, stream, y, m, n, bias);
}

}  // namespace kiln::cuda
