#include "backends/cpu/layers/elementwise.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd_exp.h"

namespace kiln::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = int64_t{1} << 15;

// Same operation order as PyTorch's fp32 kernel: x / (1 + exp(-x)).
inline float silu_one(float x) { return x / (1.0f + std::exp(-x)); }

// y[j] = silu(gate[j]) * up[j] (up == nullptr: silu alone) for j < n. The AVX2 path takes exp
// from exp_avx2 (about 1 ulp, as PyTorch's vectorised exp), eight at a time; decode runs one
// row of the intermediate size per layer on one thread, where libm's exp cost more than the
// rest of the layer's element-wise work together. Returns how many leading elements it did.
__attribute__((target("avx2,fma"))) int64_t silu_row_avx2(const float* gate, const float* up, int64_t n, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 g = _mm256_loadu_ps(gate + j);
    __m256 v = _mm256_div_ps(g, _mm256_add_ps(one, exp_avx2(_mm256_xor_ps(g, sign))));
    if (up != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(up + j));
    _mm256_storeu_ps(y + j, v);
  }
  return j;
}

void silu_row(const float* gate, const float* up, int64_t n, float* y) {
  int64_t j = isa_active() >= Isa::kAvx2 ? silu_row_avx2(gate, up, n, y) : 0;
  for (; j < n; ++j) y[j] = up != nullptr ? silu_one(gate[j]) * up[j] : silu_one(gate[j]);
}

// Long vectors run in slices of this many elements, spread over the threads.
constexpr int64_t kSlice = 4096;

}  // namespace

void add(const float* a, const float* b, int64_t n, float* y) {
  parallel_for(0, (n + kSlice - 1) / kSlice, n >= kParallelMin, [&](int64_t s) {
    const int64_t end = std::min(n, (s + 1) * kSlice);
#pragma omp simd
    for (int64_t i = s * kSlice; i < end; ++i) y[i] = a[i] + b[i];
  });
}

void mul(const float* a, const float* b, int64_t n, float* y) {
  parallel_for(0, (n + kSlice - 1) / kSlice, n >= kParallelMin, [&](int64_t s) {
    const int64_t end = std::min(n, (s + 1) * kSlice);
#pragma omp simd
    for (int64_t i = s * kSlice; i < end; ++i) y[i] = a[i] * b[i];
  });
}

void silu(const float* x, int64_t n, float* y) {
  const int64_t slices = (n + kSlice - 1) / kSlice;
  parallel_for(0, slices, n >= kParallelMin, [&](int64_t s) {
    const int64_t j0 = s * kSlice;
    silu_row(x + j0, nullptr, std::min(kSlice, n - j0), y + j0);
  });
}

void gelu_tanh(const float* x, int64_t n, float* y) {
  // sqrt(2 / pi), rounded to fp32 as the Python constant is when it multiplies an fp32 tensor.
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  parallel_for(0, n, n >= kParallelMin, [&](int64_t i) {
    const float v = x[i];
    const float inner = kSqrt2OverPi * (v + kCubic * (v * v * v));
    y[i] = (0.5f * v) * (1.0f + std::tanh(inner));
  });
}

void silu_mul(const float* x, int64_t m, int64_t inter, float* y) {
  parallel_for(0, m, m * inter >= kParallelMin, [&](int64_t i) {
    const float* gate = x + i * 2 * inter;
    silu_row(gate, gate + inter, inter, y + i * inter);
  });
}

}  // namespace kiln::cpu
