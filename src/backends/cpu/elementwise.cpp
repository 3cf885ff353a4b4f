#include "backends/cpu/elementwise.h"

#include <cmath>

namespace kiln::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = int64_t{1} << 15;

// Same operation order as PyTorch's fp32 kernel: x / (1 + exp(-x)).
inline float silu_one(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void add(const float* a, const float* b, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mul(const float* a, const float* b, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void silu(const float* x, int64_t n, float* y) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = silu_one(x[i]);
}

void gelu_tanh(const float* x, int64_t n, float* y) {
  // sqrt(2 / pi), rounded to fp32 as the Python constant is when it multiplies an fp32 tensor.
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float inner = kSqrt2OverPi * (v + kCubic * (v * v * v));
    y[i] = (0.5f * v) * (1.0f + std::tanh(inner));
  }
}

void silu_mul(const float* x, int64_t m, int64_t inter, float* y) {
#pragma omp parallel for schedule(static) if (m * inter >= kParallelMin)
  for (int64_t i = 0; i < m; ++i) {
    const float* gate = x + i * 2 * inter;
    const float* up = gate + inter;
    float* out = y + i * inter;
    for (int64_t j = 0; j < inter; ++j) out[j] = silu_one(gate[j]) * up[j];
  }
}

}  // namespace kiln::cpu
