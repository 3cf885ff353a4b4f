// Two paths with equal results (the integer sums are exact; the float steps after them are the
// same operations): AVX-512 VNNI (vpdpbusd, 4 rows x 4 vectors of 16 positions in 16
// accumulators), and portable C++ for CPUs without it.
//
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "backends/cpu/matmul/qgemm_u8s8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_isa.h"

namespace kiln::cpu {
namespace {

// The 4 weight bytes of row m at k = 4 * k4 as one int32, zero past K.
inline int32_t weight_word(const QGemmWeights& w, int64_t m, int64_t k4) {
  const int8_t* row = w.w + m * w.K;
  const int64_t k = 4 * k4;
  int32_t v = 0;
  std::memcpy(&v, row + k, static_cast<size_t>(std::min<int64_t>(4, w.K - k)));
  return v;
}

// x * inv rounded half to even, plus zp, saturated to [0, 255] (NaN becomes 0).
inline uint8_t quantize_one(float x, float inv, int zp) {
  const float q = std::nearbyint(std::min(std::max(x * inv, -512.0f), 512.0f)) + static_cast<float>(zp);
  return q > 0.0f ? static_cast<uint8_t>(q < 255.0f ? q : 255.0f) : uint8_t{0};
}

inline float finish(const QGemmWeights& w, int64_t m, int32_t acc) {
  const float bias = w.bias != nullptr ? w.bias[m] : 0.0f;
  return static_cast<float>(acc - w.zero_point * w.w_sum[m]) * w.scale[m] + bias;
}

void tile_generic(const QGemmWeights& w, const uint8_t* packed, int npos, int64_t m0, int rows, float* out) {
  const int64_t k4n = (w.K + 3) / 4;
  for (int r = 0; r < rows; ++r) {
    int32_t acc[kQTile] = {};
    for (int64_t k4 = 0; k4 < k4n; ++k4) {
      const int32_t word = weight_word(w, m0 + r, k4);
      int8_t wb[4];
      std::memcpy(wb, &word, 4);
      const uint8_t* col = packed + k4 * kQTile * 4;
      for (int p = 0; p < npos; ++p) {
        acc[p] += col[4 * p] * wb[0] + col[4 * p + 1] * wb[1] + col[4 * p + 2] * wb[2] + col[4 * p + 3] * wb[3];
      }
    }
    for (int p = 0; p < npos; ++p) out[r * kQTile + p] = finish(w, m0 + r, acc[p]);
  }
}

// One step of k: four packed vectors of positions times each row's 4 weight bytes.
#define KILN_QGEMM_STEP(col, WORD)                                              \
  {                                                                            \
    const __m512i c0 = _mm512_loadu_si512(col), c1 = _mm512_loadu_si512(col + 64);   \
    const __m512i c2 = _mm512_loadu_si512(col + 128), c3 = _mm512_loadu_si512(col + 192); \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; ++r) {                       \
      const __m512i wb = _mm512_set1_epi32(WORD(r));                            \
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], c0, wb);                       \
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], c1, wb);                       \
      acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], c2, wb);                       \
      acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], c3, wb);                       \
    }                                                                          \
  }

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_avx512(const QGemmWeights& w,
                                                                         const uint8_t* packed, int npos,
                                                                         int64_t m0, int rows, float* out) {
  const int64_t k4_full = w.K / 4;
  // The accumulators are indexed only by constants, so that they live in registers.
  __m512i acc[4][4];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; ++r) {
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  const int8_t* wrow[4];
  for (int r = 0; r < 4; ++r) wrow[r] = w.w + (m0 + std::min(r, rows - 1)) * w.K;
  int64_t k4 = 0;
  for (; k4 < k4_full; ++k4) {
    const uint8_t* col = packed + k4 * kQTile * 4;
    const auto word = [&](int r) {
      int32_t v;
      std::memcpy(&v, wrow[r] + 4 * k4, 4);
      return v;
    };
    KILN_QGEMM_STEP(col, word)
  }
  if (k4_full * 4 < w.K) {
    const uint8_t* col = packed + k4 * kQTile * 4;
    const auto word = [&](int r) {
      int32_t v = 0;
      std::memcpy(&v, wrow[r] + 4 * k4, static_cast<size_t>(w.K - 4 * k4));
      return v;
    };
    KILN_QGEMM_STEP(col, word)
  }
  alignas(64) int32_t sums[4][kQTile];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; ++r) {
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; ++v) _mm512_store_si512(sums[r] + 16 * v, acc[r][v]);
  }
  const int vecs = (npos + 15) / 16;
  for (int r = 0; r < rows; ++r) {
    const int64_t m = m0 + r;
    const __m512i corr = _mm512_set1_epi32(w.zero_point * w.w_sum[m]);
    const __m512 scale = _mm512_set1_ps(w.scale[m]), bias = _mm512_set1_ps(w.bias != nullptr ? w.bias[m] : 0.0f);
    for (int v = 0; v < vecs; ++v) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(sums[r] + 16 * v), corr));
      // Multiply then add (no fused multiply-add), as finish() does.
      _mm512_storeu_ps(out + r * kQTile + 16 * v, _mm512_add_ps(_mm512_mul_ps(f, scale), bias));
    }
  }
}
#undef KILN_QGEMM_STEP

__attribute__((target("avx512f,avx512bw"))) void quantize_avx512(const float* x, int64_t n, float inv, int zp,
                                                                  uint8_t* u) {
  const __m512 vinv = _mm512_set1_ps(inv), fmin = _mm512_set1_ps(-512.0f), fmax = _mm512_set1_ps(512.0f);
  const __m512i vzp = _mm512_set1_epi32(zp), lo = _mm512_setzero_si512(), hi = _mm512_set1_epi32(255);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv), fmin), fmax);
    __m512i q = _mm512_cvtps_epi32(f);  // half to even
    q = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(q, vzp), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + i), _mm512_cvtepi32_epi8(q));
  }
  for (; i < n; ++i) u[i] = quantize_one(x[i], inv, zp);
}

}  // namespace

void qgemm_tile(const QGemmWeights& w, const uint8_t* packed, int npos, int64_t m0, int rows, float* out) {
  if (isa_active() >= Isa::kAvx512) {
    tile_avx512(w, packed, npos, m0, rows, out);
  } else {
    tile_generic(w, packed, npos, m0, rows, out);
  }
}

void quantize_u8(const float* x, int64_t n, float x_scale, int zero_point, uint8_t* u) {
  const float inv = 1.0f / x_scale;
  if (isa_active() >= Isa::kAvx512) {
    quantize_avx512(x, n, inv, zero_point, u);
    return;
  }
  for (int64_t i = 0; i < n; ++i) u[i] = quantize_one(x[i], inv, zero_point);
}

std::vector<int32_t> qgemm_row_sums(const int8_t* w, int64_t M, int64_t K) {
  std::vector<int32_t> sums(static_cast<size_t>(M), 0);
  for (int64_t m = 0; m < M; ++m) {
    int32_t s = 0;
    for (int64_t k = 0; k < K; ++k) s += w[m * K + k];
    sums[static_cast<size_t>(m)] = s;
  }
  return sums;
}

}  // namespace kiln::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
