// AVX2 integer-dot kernels for the int8 and int4 weight formats ("q8dot"). Activations are first
// quantised to int8 per block of 32 (quantize_activations.h); each 32-element block product is
// then computed exactly in integers with vpmaddubsw (u8 x s8 -> pairs of i16) and vpmaddwd
// (-> i32), converted to float once per block and scaled by d_x * d_w.
//   int8 weights: maddubs needs an unsigned operand, so |w| is multiplied with sign(w) * x
//                 (both at most 127 in magnitude: a pair sum is <= 2 * 127 * 127 < 2^15).
//   int4 weights: the stored nibble u = w + 8 is already unsigned (<= 15), so u · x is computed
//                 directly and 8 * sum(x) of the block (kept with the quantised activations)
//                 is subtracted: sum((u - 8) * x) = u · x - 8 * sum(x).
// Compiled for AVX2 with a target pragma; only called when isa_active() >= Isa::kAvx2.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/isa_target.h"
#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/matmul/matmul_tiling.h"
#include "backends/cpu/matmul/quantize_activations.h"

KILN_ISA_TARGET_BEGIN(KILN_ISA_FEATURES_AVX2)

namespace kiln::cpu::avx2 {
namespace {

using ir::WeightFormat;

float load_fp16_scale(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Block access for one stored weight row: the 32 weights of activation block b (elements
// [32b, 32b + 32)) as bytes, and their scale.
template <WeightFormat kFormat>
struct Q8Weights;

template <>
struct Q8Weights<WeightFormat::kI8Channel> {
  static constexpr bool kUnsigned = false;
  static constexpr bool kRowScale = true;  // one scale per row, applied after the sum
  static __m256i load(const std::byte* row, int64_t b, int64_t k) {
    const int64_t begin = b * kQ8Block;
    if (begin + kQ8Block <= k) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + begin));
    alignas(32) std::byte tail[kQ8Block] = {};  // the row's last, partial block; x is zero there
    std::memcpy(tail, row + begin, static_cast<size_t>(k - begin));
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
  }
  static float row_scale(const std::byte* row, int64_t k) {
    float s;
    std::memcpy(&s, row + k, sizeof(float));
    return s;
  }
};

template <int kG>
struct Q8WeightsI8Group {
  static constexpr bool kUnsigned = false;
  static constexpr bool kRowScale = false;
  static constexpr size_t kBlock = 2 + kG;
  static const std::byte* group(const std::byte* row, int64_t b) {
    return row + static_cast<size_t>(b / (kG / kQ8Block)) * kBlock;
  }
  static __m256i load(const std::byte* row, int64_t b, int64_t /*k*/) {
    const size_t sub = static_cast<size_t>(b % (kG / kQ8Block)) * kQ8Block;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group(row, b) + 2 + sub));
  }
  static float scale(const std::byte* row, int64_t b) { return load_fp16_scale(group(row, b)); }
};
template <>
struct Q8Weights<WeightFormat::kI8Group32> : Q8WeightsI8Group<32> {};
template <>
struct Q8Weights<WeightFormat::kI8Group128> : Q8WeightsI8Group<128> {};

template <>
struct Q8Weights<WeightFormat::kI4Group32> {
  static constexpr bool kUnsigned = true;
  static constexpr bool kRowScale = false;
  static const std::byte* group(const std::byte* row, int64_t b) { return row + static_cast<size_t>(b) * 18; }
  // Low nibbles are elements 0..15, high nibbles 16..31.
  static __m256i load(const std::byte* row, int64_t b, int64_t /*k*/) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(group(row, b) + 2));
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
  }
  static float scale(const std::byte* row, int64_t b) { return load_fp16_scale(group(row, b)); }
};

template <>
struct Q8Weights<WeightFormat::kI4Group128> {
  static constexpr bool kUnsigned = true;
  static constexpr bool kRowScale = false;
  static const std::byte* group(const std::byte* row, int64_t b) { return row + static_cast<size_t>(b / 4) * 66; }
  // Block s of the group: s = 0, 1 are the low nibbles of payload bytes [32s, 32s + 32),
  // s = 2, 3 the high nibbles of bytes [32(s - 2), 32(s - 2) + 32).
  static __m256i load(const std::byte* row, int64_t b, int64_t /*k*/) {
    const int s = static_cast<int>(b % 4);
    __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group(row, b) + 2 + (s & 1) * 32));
    if (s >= 2) q = _mm256_srli_epi16(q, 4);
    return _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
  }
  static float scale(const std::byte* row, int64_t b) { return load_fp16_scale(group(row, b)); }
};

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// y[0:R, 0:C] = (accumulate ? y : bias or 0) + x[i:i+R, blocks b0..b1) · w[0:C, same]^T, with x
// quantised in xq and w rows at stride ldw bytes.
template <WeightFormat kFormat, int R, int C>
void q8_tile(const Q8Rows& xq, int64_t i, const std::byte* w, size_t ldw, int64_t k, int64_t b0, int64_t b1,
             float* y, int64_t ldy, const float* bias, bool accumulate) {
  using W = Q8Weights<kFormat>;
  __m256 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t qs = xq.q_stride();
  for (int64_t b = b0; b < b1; ++b) {
    __m256i wq[C];
    __m256 ws[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      wq[c] = W::load(w + c * ldw, b, k);
      if constexpr (!W::kRowScale) ws[c] = _mm256_set1_ps(W::scale(w + c * ldw, b));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q + (i + r) * qs + b * kQ8Block));
      const __m256 dx = _mm256_broadcast_ss(xq.d + (i + r) * xq.blocks + b);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        __m256i p;
        if constexpr (W::kUnsigned) {
          const __m256i sx = _mm256_set1_epi32(xq.sum[(i + r) * xq.blocks + b]);
          p = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wq[c], xv), ones), sx);
        } else {
          p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wq[c], wq[c]), _mm256_sign_epi8(xv, wq[c])),
                                ones);
        }
        if constexpr (W::kRowScale) {
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), dx, acc[r][c]);
        } else {
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dx, ws[c]), acc[r][c]);
        }
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    float row_scale = 1.0f;
    if constexpr (W::kRowScale) row_scale = W::row_scale(w + c * ldw, k);
    for (int r = 0; r < R; ++r) {
      const float base = accumulate ? y[r * ldy + c] : (bias != nullptr ? bias[c] : 0.0f);
      y[r * ldy + c] = base + hsum(acc[r][c]) * row_scale;
    }
  }
}

template <WeightFormat kFormat, int R, int C>
void q8_tile_edge(int r, int c, const Q8Rows& xq, int64_t i, const std::byte* w, size_t ldw, int64_t k,
                  int64_t b0, int64_t b1, float* y, int64_t ldy, const float* bias, bool accumulate) {
  if constexpr (R > 1) {
    if (r < R) return q8_tile_edge<kFormat, R - 1, C>(r, c, xq, i, w, ldw, k, b0, b1, y, ldy, bias, accumulate);
  }
  if constexpr (C > 1) {
    if (c < C) return q8_tile_edge<kFormat, R, C - 1>(r, c, xq, i, w, ldw, k, b0, b1, y, ldy, bias, accumulate);
  }
  q8_tile<kFormat, R, C>(xq, i, w, ldw, k, b0, b1, y, ldy, bias, accumulate);
}

// x: [m, k] float; w: [n, k] in kFormat; y: [m, n].
template <WeightFormat kFormat, int R, int C>
void matmul_q8dot(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                  float* y) {
  const size_t row_bytes = ir::weight_format_row_bytes(kFormat, k);
  const int64_t granule = std::max<int64_t>(kQ8Block, ir::weight_format_group(kFormat));
  const detail::Blocking bl = detail::matmul_blocking(m, n, k, R, C, 1024, granule);
  const Q8Rows xq =
      q8_rows_view(detail::matmul_scratch(q8_rows_bytes(m, k), detail::kScratchActivations), m, k);
  const auto quantize = [&] {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < m; ++r) q8_quantize_row(x + r * k, r, xq, Isa::kAvx2);
  };
  detail::matmul_parallel(m, n, bl, quantize, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    for (int64_t k0 = 0; k0 < k; k0 += bl.kc) {
      const int64_t b0 = k0 / kQ8Block;
      const int64_t b1 = detail::ceil_div(std::min(k, k0 + bl.kc), kQ8Block);
      for (int64_t i = i0; i < i1; i += R) {
        const int r = static_cast<int>(std::min<int64_t>(R, i1 - i));
        for (int64_t j = j0; j < j1; j += C) {
          const int c = static_cast<int>(std::min<int64_t>(C, j1 - j));
          q8_tile_edge<kFormat, R, C>(r, c, xq, i, w + static_cast<size_t>(j) * row_bytes, row_bytes, k, b0, b1,
                                      y + i * n + j, n, bias != nullptr ? bias + j : nullptr, k0 > 0);
        }
      }
    }
  });
}

constexpr MatmulKernel kKernels[] = {
    {"i4g32.avx2.q8dot", WeightFormat::kI4Group32, Isa::kAvx2, matmul_q8dot<WeightFormat::kI4Group32, 4, 2>},
    {"i4g32.avx2.q8dot.2x4", WeightFormat::kI4Group32, Isa::kAvx2, matmul_q8dot<WeightFormat::kI4Group32, 2, 4>},
    {"i4g128.avx2.q8dot", WeightFormat::kI4Group128, Isa::kAvx2, matmul_q8dot<WeightFormat::kI4Group128, 4, 2>},
    {"i4g128.avx2.q8dot.2x4", WeightFormat::kI4Group128, Isa::kAvx2,
     matmul_q8dot<WeightFormat::kI4Group128, 2, 4>},
    {"i8g32.avx2.q8dot", WeightFormat::kI8Group32, Isa::kAvx2, matmul_q8dot<WeightFormat::kI8Group32, 4, 2>},
    {"i8g32.avx2.q8dot.2x4", WeightFormat::kI8Group32, Isa::kAvx2, matmul_q8dot<WeightFormat::kI8Group32, 2, 4>},
    {"i8g128.avx2.q8dot", WeightFormat::kI8Group128, Isa::kAvx2, matmul_q8dot<WeightFormat::kI8Group128, 4, 2>},
    {"i8g128.avx2.q8dot.2x4", WeightFormat::kI8Group128, Isa::kAvx2,
     matmul_q8dot<WeightFormat::kI8Group128, 2, 4>},
    {"i8c.avx2.q8dot", WeightFormat::kI8Channel, Isa::kAvx2, matmul_q8dot<WeightFormat::kI8Channel, 4, 2>},
    {"i8c.avx2.q8dot.2x4", WeightFormat::kI8Channel, Isa::kAvx2, matmul_q8dot<WeightFormat::kI8Channel, 2, 4>},
};

}  // namespace
}  // namespace kiln::cpu::avx2

KILN_ISA_TARGET_END()

namespace kiln::cpu::detail {
std::span<const MatmulKernel> matmul_kernels_avx2_q8dot() { return avx2::kKernels; }
}  // namespace kiln::cpu::detail
