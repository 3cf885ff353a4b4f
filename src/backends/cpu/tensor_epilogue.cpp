#include "backends/cpu/tensor_epilogue.h"

#include <algorithm>

#include "backends/cpu/cpu_isa.h"

namespace kiln::cpu {
namespace {

// y[i] = f(y[i]) * scale + shift, in float: loops the compiler vectorises. Always inlined, so
// that the AVX-512 copy of epilogue_body gets its own AVX-512 loops.
template <typename F>
__attribute__((always_inline)) inline void pointwise(float* y, int64_t n, float scale, float shift, F f) {
  if (scale == 1.0f && shift == 0.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(y[i]) * scale + shift;
  }
}

// Compiled twice, for AVX-512 and the baseline ISA.
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

__attribute__((target("avx512f,avx512dq,avx2,fma"))) void epilogue_avx512(const ir::Epilogue& e, float* y, int64_t n) {
  epilogue_body(e, y, n);
}

}  // namespace

void apply_epilogue_f32(const ir::Epilogue& e, float* y, int64_t n) {
  if (e.empty()) return;
  if (isa_active() >= Isa::kAvx512) {
    epilogue_avx512(e, y, n);
  } else {
    epilogue_body(e, y, n);
  }
}

}  // namespace kiln::cpu
