// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "backends/cpu/tensor/tensor_epilogue.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/simd_exp.h"

namespace kiln::cpu {
namespace {

// y[i] = f(y[i]) * scale + shift, in float: loops the compiler vectorises. Always inlined, so
// that the AVX-512 and AVX2 copies of epilogue_body get their own vector loops.
template <typename F>
__attribute__((always_inline)) inline void pointwise(float* y, int64_t n, float scale, float shift, F f) {
  if (scale == 1.0f && shift == 0.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(y[i]) * scale + shift;
  }
}

// Compiled three times, for AVX-512, AVX2 and the baseline ISA.
__attribute__((always_inline)) inline void epilogue_body(const ir::Epilogue& e, float* y, int64_t n) {
  const auto scale = static_cast<float>(e.scale), shift = static_cast<float>(e.shift);
  const auto alpha = static_cast<float>(e.alpha), beta = static_cast<float>(e.beta);
  switch (e.activation) {
    case ir::Activation::kNone: return pointwise(y, n, scale, shift, [](float v) { return v; });
    case ir::Activation::kRelu: return pointwise(y, n, scale, shift, [](float v) { return std::max(v, 0.0f); });
    case ir::Activation::kLeakyRelu:
      return pointwise(y, n, scale, shift, [alpha](float v) { return v >= 0.0f ? v : alpha * v; });
    case ir::Activation::kHardSigmoid:
      return pointwise(y, n, scale, shift, [alpha, beta](float v) { return std::min(std::max(alpha * v + beta, 0.0f), 1.0f); });
    case ir::Activation::kHardSwish:
      return pointwise(y, n, scale, shift, [](float v) {
        return v * std::min(std::max(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
      });
    case ir::Activation::kClip:
      return pointwise(y, n, scale, shift, [alpha, beta](float v) { return std::min(std::max(v, alpha), beta); });
    default:  // the transcendental ones, in double as the unfused nodes compute them
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(ir::apply_epilogue(e, y[i]));
  }
}

// Gelu, x * (1 + erf(x / sqrt 2)) / 2, 8 floats at a time, then * scale + shift. erf from
// Abramowitz and Stegun's 7.1.26 (absolute error under 1.5e-7): for a >= 0,
// erf(a) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-a^2), t = 1 / (1 + p a); odd in a.
__attribute__((target("avx2,fma"))) void gelu_avx2(float* y, int64_t n, float scale, float shift) {
  const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 vs = _mm256_set1_ps(scale), vb = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(y + i);
    const __m256 z = _mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f));
    const __m256 a = _mm256_andnot_ps(sign, z);
    const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, one));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    const __m256 e = exp_avx2(_mm256_xor_ps(_mm256_mul_ps(a, a), sign));
    const __m256 erf_a = _mm256_fnmadd_ps(p, e, one);
    const __m256 erf_z = _mm256_or_ps(erf_a, _mm256_and_ps(z, sign));  // odd: the sign of z
    const __m256 g = _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, erf_z));
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(g, vs), vb));
  }
  for (; i < n; ++i) y[i] = static_cast<float>(0.5 * y[i] * (1.0 + std::erf(y[i] / std::sqrt(2.0)))) * scale + shift;
}

// gelu_avx2's operations 16 floats at a time (the same bits a lane); the rest goes to gelu_avx2.
__attribute__((target("avx512f,avx512dq,avx2,fma"))) void gelu_avx512(float* y, int64_t n, float scale, float shift) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512 vs = _mm512_set1_ps(scale), vb = _mm512_set1_ps(shift);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(y + i);
    const __m512 z = _mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f));
    const __m512i zi = _mm512_castps_si512(z);
    const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, zi));
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, one));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    p = _mm512_mul_ps(p, t);
    const __m512 e = exp_avx512(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(a, a)), sign)));
    const __m512 erf_a = _mm512_fnmadd_ps(p, e, one);
    const __m512 erf_z = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(erf_a), _mm512_and_si512(zi, sign)));  // odd: the sign of z
    const __m512 g = _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, erf_z));
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_mul_ps(g, vs), vb));
  }
  gelu_avx2(y + i, n - i, scale, shift);
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) void epilogue_avx512(const ir::Epilogue& e, float* y, int64_t n) {
  epilogue_body(e, y, n);
}

// The piecewise-linear activations 8 floats at a time, then * scale + shift; the operand order of
// max and min keeps epilogue_body's answers for NaN and signed zeros (std::max(v, 0) is v unless
// v < 0; _mm256_max_ps returns its second operand when either is NaN or both are zero). GCC does
// not vectorise epilogue_body's branches for AVX2. The transcendental ones take epilogue_body.
template <ir::Activation A>
__attribute__((target("avx2,fma"))) inline __m256 piecewise_avx2(__m256 v, __m256 alpha, __m256 beta) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  if constexpr (A == ir::Activation::kRelu) return _mm256_max_ps(zero, v);
  if constexpr (A == ir::Activation::kLeakyRelu) {
    return _mm256_blendv_ps(_mm256_mul_ps(alpha, v), v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ));
  }
  if constexpr (A == ir::Activation::kHardSigmoid) {
    return _mm256_min_ps(one, _mm256_max_ps(zero, _mm256_fmadd_ps(alpha, v, beta)));
  }
  if constexpr (A == ir::Activation::kHardSwish) {
    const __m256 h = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
    return _mm256_mul_ps(v, _mm256_min_ps(one, _mm256_max_ps(zero, h)));
  }
  if constexpr (A == ir::Activation::kClip) return _mm256_min_ps(beta, _mm256_max_ps(alpha, v));
  return v;
}

template <ir::Activation A>
__attribute__((target("avx2,fma"))) void piecewise_run_avx2(const ir::Epilogue& e, float* y, int64_t n) {
  const __m256 alpha = _mm256_set1_ps(static_cast<float>(e.alpha)), beta = _mm256_set1_ps(static_cast<float>(e.beta));
  const __m256 scale = _mm256_set1_ps(static_cast<float>(e.scale)), shift = _mm256_set1_ps(static_cast<float>(e.shift));
  const bool affine = e.scale != 1.0 || e.shift != 0.0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = piecewise_avx2<A>(_mm256_loadu_ps(y + i), alpha, beta);
    if (affine) v = _mm256_fmadd_ps(v, scale, shift);
    _mm256_storeu_ps(y + i, v);
  }
  epilogue_body(e, y + i, n - i);
}

__attribute__((target("avx2,fma"))) void epilogue_avx2(const ir::Epilogue& e, float* y, int64_t n) {
  switch (e.activation) {
    case ir::Activation::kNone: return piecewise_run_avx2<ir::Activation::kNone>(e, y, n);
    case ir::Activation::kRelu: return piecewise_run_avx2<ir::Activation::kRelu>(e, y, n);
    case ir::Activation::kLeakyRelu: return piecewise_run_avx2<ir::Activation::kLeakyRelu>(e, y, n);
    case ir::Activation::kHardSigmoid: return piecewise_run_avx2<ir::Activation::kHardSigmoid>(e, y, n);
    case ir::Activation::kHardSwish: return piecewise_run_avx2<ir::Activation::kHardSwish>(e, y, n);
    case ir::Activation::kClip: return piecewise_run_avx2<ir::Activation::kClip>(e, y, n);
    default: epilogue_body(e, y, n);
  }
}

}  // namespace

void apply_epilogue_f32(const ir::Epilogue& e, float* y, int64_t n) {
  if (e.empty()) return;
  if (e.activation == ir::Activation::kGelu && isa_active() >= Isa::kAvx2) {
    const auto scale = static_cast<float>(e.scale), shift = static_cast<float>(e.shift);
    if (isa_active() >= Isa::kAvx512) {
      gelu_avx512(y, n, scale, shift);
    } else {
      gelu_avx2(y, n, scale, shift);
    }
    return;
  }
  if (isa_active() >= Isa::kAvx512) {
    epilogue_avx512(e, y, n);
  } else if (isa_active() >= Isa::kAvx2) {
    epilogue_avx2(e, y, n);
  } else {
    epilogue_body(e, y, n);
  }
}

}  // namespace kiln::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
