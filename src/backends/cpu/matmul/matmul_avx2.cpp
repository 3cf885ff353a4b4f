// AVX2 + FMA + F16C float-tile kernels (see matmul_float_tiles.h): float formats read in place,
// and every format through a dequantised float panel. Compiled for AVX2 with a target pragma;
// only called when isa_active() >= Isa::kAvx2.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/isa_target.h"
#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/matmul/matmul_tiling.h"
#include "base/half.h"

KILN_ISA_TARGET_BEGIN(KILN_ISA_FEATURES_AVX2)

namespace kiln::cpu::avx2 {
namespace {

struct V {
  using F = __m256;
  static constexpr int kLanes = 8;
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static F load_f16(const void* p) { return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
  static F load_bf16(const void* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static F load_i8(const void* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
  static F load_u4_lo(const void* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
    const __m256i v = _mm256_and_si256(b, _mm256_set1_epi32(0x0f));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(v, _mm256_set1_epi32(8)));
  }
  static F load_u4_hi(const void* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
    const __m256i v = _mm256_srli_epi32(b, 4);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(v, _mm256_set1_epi32(8)));
  }
};

#include "backends/cpu/matmul/matmul_float_tiles.h"  // NOLINT(build/include): instantiated per ISA

using ir::WeightFormat;

constexpr MatmulKernel kKernels[] = {
    {"f32.avx2.4x3", WeightFormat::kF32, Isa::kAvx2, matmul_float_direct<LoadF32, WeightFormat::kF32, 4, 3>},
    {"f32.avx2.3x4", WeightFormat::kF32, Isa::kAvx2, matmul_float_direct<LoadF32, WeightFormat::kF32, 3, 4>},
    {"f16.avx2.4x3", WeightFormat::kF16, Isa::kAvx2, matmul_float_direct<LoadF16, WeightFormat::kF16, 4, 3>},
    {"f16.avx2.dq.4x3", WeightFormat::kF16, Isa::kAvx2, matmul_dequant_panel<WeightFormat::kF16, 4, 3>},
    {"bf16.avx2.4x3", WeightFormat::kBF16, Isa::kAvx2, matmul_float_direct<LoadBF16, WeightFormat::kBF16, 4, 3>},
    {"bf16.avx2.dq.4x3", WeightFormat::kBF16, Isa::kAvx2, matmul_dequant_panel<WeightFormat::kBF16, 4, 3>},
    {"i8c.avx2.dq.4x3", WeightFormat::kI8Channel, Isa::kAvx2, matmul_dequant_panel<WeightFormat::kI8Channel, 4, 3>},
    {"f8.avx2.dq.4x3", WeightFormat::kF8E4M3, Isa::kAvx2, matmul_dequant_panel<WeightFormat::kF8E4M3, 4, 3>},
    {"i8g32.avx2.dq.4x3", WeightFormat::kI8Group32, Isa::kAvx2, matmul_dequant_panel<WeightFormat::kI8Group32, 4, 3>},
    {"i8g128.avx2.dq.4x3", WeightFormat::kI8Group128, Isa::kAvx2,
     matmul_dequant_panel<WeightFormat::kI8Group128, 4, 3>},
    {"i4g32.avx2.dq.4x3", WeightFormat::kI4Group32, Isa::kAvx2, matmul_dequant_panel<WeightFormat::kI4Group32, 4, 3>},
    {"i4g128.avx2.dq.4x3", WeightFormat::kI4Group128, Isa::kAvx2,
     matmul_dequant_panel<WeightFormat::kI4Group128, 4, 3>},
};

}  // namespace
}  // namespace kiln::cpu::avx2

KILN_ISA_TARGET_END()

namespace kiln::cpu::detail {
std::span<const MatmulKernel> matmul_kernels_avx2_float() { return avx2::kKernels; }
}  // namespace kiln::cpu::detail
