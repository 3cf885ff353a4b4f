// AVX-512 float-tile kernels (see matmul_float_tiles.h): 16-lane vectors and, with 32 vector
// registers, taller tiles than AVX2. Compiled with a target pragma; only called when
// isa_active() >= Isa::kAvx512.
//
// GCC 12's AVX-512 intrinsic headers initialise "undefined" vectors from themselves, which its
// -Wmaybe-uninitialized reports at the header's lines (GCC bug 105593); the diagnostic state at
// those lines is what counts, so the warnings are silenced before the header is first read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/isa_target.h"
#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/matmul/matmul_tiling.h"
#include "base/half.h"

KILN_ISA_TARGET_BEGIN(KILN_ISA_FEATURES_AVX512)

namespace kiln::cpu::avx512 {
namespace {

struct V {
  using F = __m512;
  static constexpr int kLanes = 16;
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  // Through memory: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized inside its own header.
  static float hsum(F v) {
    alignas(64) float t[16];
    _mm512_store_ps(t, v);
    __m256 h = _mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(t + 8));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static F load_f16(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static F load_bf16(const void* p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  static F load_i8(const void* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }
  static F load_u4_lo(const void* p) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    const __m512i v = _mm512_and_si512(b, _mm512_set1_epi32(0x0f));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_set1_epi32(8)));
  }
  static F load_u4_hi(const void* p) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    const __m512i v = _mm512_srli_epi32(b, 4);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_set1_epi32(8)));
  }
};

#include "backends/cpu/matmul/matmul_float_tiles.h"  // NOLINT(build/include): instantiated per ISA

using ir::WeightFormat;

constexpr MatmulKernel kKernels[] = {
    {"f32.avx512.6x4", WeightFormat::kF32, Isa::kAvx512, matmul_float_direct<LoadF32, WeightFormat::kF32, 6, 4>},
    {"f32.avx512.4x3", WeightFormat::kF32, Isa::kAvx512, matmul_float_direct<LoadF32, WeightFormat::kF32, 4, 3>},
    {"f16.avx512.6x4", WeightFormat::kF16, Isa::kAvx512, matmul_float_direct<LoadF16, WeightFormat::kF16, 6, 4>},
    {"f16.avx512.dq.6x4", WeightFormat::kF16, Isa::kAvx512, matmul_dequant_panel<WeightFormat::kF16, 6, 4>},
    {"bf16.avx512.6x4", WeightFormat::kBF16, Isa::kAvx512, matmul_float_direct<LoadBF16, WeightFormat::kBF16, 6, 4>},
    {"bf16.avx512.dq.6x4", WeightFormat::kBF16, Isa::kAvx512, matmul_dequant_panel<WeightFormat::kBF16, 6, 4>},
    {"i8c.avx512.dq.6x4", WeightFormat::kI8Channel, Isa::kAvx512, matmul_dequant_panel<WeightFormat::kI8Channel, 6, 4>},
    {"f8.avx512.dq.6x4", WeightFormat::kF8E4M3, Isa::kAvx512, matmul_dequant_panel<WeightFormat::kF8E4M3, 6, 4>},
    {"i8g32.avx512.dq.6x4", WeightFormat::kI8Group32, Isa::kAvx512,
     matmul_dequant_panel<WeightFormat::kI8Group32, 6, 4>},
    {"i8g128.avx512.dq.6x4", WeightFormat::kI8Group128, Isa::kAvx512,
     matmul_dequant_panel<WeightFormat::kI8Group128, 6, 4>},
    {"i4g32.avx512.dq.6x4", WeightFormat::kI4Group32, Isa::kAvx512,
     matmul_dequant_panel<WeightFormat::kI4Group32, 6, 4>},
    {"i4g128.avx512.dq.6x4", WeightFormat::kI4Group128, Isa::kAvx512,
     matmul_dequant_panel<WeightFormat::kI4Group128, 6, 4>},
};

}  // namespace
}  // namespace kiln::cpu::avx512

KILN_ISA_TARGET_END()

namespace kiln::cpu::detail {
std::span<const MatmulKernel> matmul_kernels_avx512_float() { return avx512::kKernels; }
}  // namespace kiln::cpu::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
