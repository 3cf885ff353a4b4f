// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backends/cpu/vision/conv_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_epilogue.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kTile = 64;  // output positions a tile: four AVX-512 vectors
constexpr int kRows = 4;       // output channels a pass over the tile (AVX2: 6)

// The tile's patch matrix: col[k, j] for output positions p0 .. p0 + n - 1, rows of kTile floats.
void gather_tile(const float* x, const int64_t* taps, const ConvGemmShape& s, int64_t p0, int64_t n, float* col) {
  const int64_t channels = s.K / s.k_sp;
  for (int64_t c = 0; c < channels; ++c) {
    const float* xc = x + c * s.in_sp;
    for (int64_t ki = 0; ki < s.k_sp; ++ki) {
      float* row = col + (c * s.k_sp + ki) * kTile;
      const int64_t* t = taps + p0 * s.k_sp + ki;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t off = t[j * s.k_sp];
        row[j] = off >= 0 ? xc[off] : 0.0f;
      }
    }
  }
}

// The same from a 2-D window: for each output row the tile crosses, each kernel position reads a
// run of input columns (contiguous at unit stride), zero where it falls into the padding.
void gather_tile_2d(const float* x, const ConvGemmShape& s, int64_t p0, int64_t n, float* col) {
  const ConvWindow2d& g = *s.window;
  const int64_t channels = s.K / s.k_sp;
  for (int64_t j0 = 0; j0 < n;) {
    const int64_t oy = (p0 + j0) / g.ow, ox0 = (p0 + j0) % g.ow;
    const int64_t run = std::min(n - j0, g.ow - ox0);  // positions of this output row in the tile
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t ki = ky * g.kw + kx, off = kx * g.dw - g.pw;
        // Positions j of the run with 0 <= (ox0 + j) * sw + off < iw.
        const int64_t first = ox0 * g.sw + off;
        const int64_t lo = std::clamp<int64_t>(first >= 0 ? 0 : (-first + g.sw - 1) / g.sw, 0, run);
        const int64_t hi = std::clamp<int64_t>(g.iw - first <= 0 ? 0 : (g.iw - first + g.sw - 1) / g.sw, lo, run);
        for (int64_t c = 0; c < channels; ++c) {
          float* row = col + (c * s.k_sp + ki) * kTile + j0;
          if (iy < 0 || iy >= g.ih) {
            std::fill(row, row + run, 0.0f);
            continue;
          }
          const float* xr = x + c * s.in_sp + iy * g.iw;
          if (g.sw == 1) {
            std::fill(row, row + lo, 0.0f);
            std::copy(xr + ox0 + lo + off, xr + ox0 + hi + off, row + lo);
            std::fill(row + hi, row + run, 0.0f);
          } else {
            for (int64_t j = 0; j < run; ++j) row[j] = j >= lo && j < hi ? xr[(ox0 + j) * g.sw + off] : 0.0f;
          }
        }
      }
    }
    j0 += run;
  }
}

// R output channels over n <= kTile positions: y[r, j] = bias[r] + sum_k w[r, k] * col[k, j].
template <int R>
void rows_portable(const float* w, int64_t K, const float* bias, const float* col, int64_t col_stride, int64_t n,
                   float* y, int64_t y_stride, const ir::Epilogue& ep) {
  float acc[R][kTile];
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < n; ++j) acc[r][j] = bias != nullptr ? bias[r] : 0.0f;
  }
  for (int64_t k = 0; k < K; ++k) {
    const float* xr = col + k * col_stride;
    for (int r = 0; r < R; ++r) {
      const float wv = w[r * K + k];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) acc[r][j] += wv * xr[j];
    }
  }
  for (int r = 0; r < R; ++r) {
    std::copy(acc[r], acc[r] + n, y + r * y_stride);
    apply_epilogue_f32(ep, y + r * y_stride, n);
  }
}

#define KILN_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma")))

// The piecewise-linear epilogues on a register; false for the others (applied after the store).
KILN_AVX512 inline bool epilogue_in_registers(const ir::Epilogue& e) {
  switch (e.activation) {
    case ir::Activation::kNone:
    case ir::Activation::kRelu:
    case ir::Activation::kHardSwish:
    case ir::Activation::kHardSigmoid:
    case ir::Activation::kClip: return true;
    default: return false;
  }
}

KILN_AVX512 inline __m512 epilogue512(const ir::Epilogue& e, __m512 v) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  switch (e.activation) {
    case ir::Activation::kRelu: v = _mm512_max_ps(v, zero); break;
    case ir::Activation::kHardSwish: {
      const __m512 h = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
      v = _mm512_mul_ps(v, _mm512_min_ps(_mm512_max_ps(h, zero), one));
      break;
    }
    case ir::Activation::kHardSigmoid: {
      const __m512 h = _mm512_fmadd_ps(v, _mm512_set1_ps(static_cast<float>(e.alpha)), _mm512_set1_ps(static_cast<float>(e.beta)));
      v = _mm512_min_ps(_mm512_max_ps(h, zero), one);
      break;
    }
    case ir::Activation::kClip:
      v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(static_cast<float>(e.alpha))), _mm512_set1_ps(static_cast<float>(e.beta)));
      break;
    default: break;
  }
  if (e.scale != 1.0 || e.shift != 0.0) {
    v = _mm512_fmadd_ps(v, _mm512_set1_ps(static_cast<float>(e.scale)), _mm512_set1_ps(static_cast<float>(e.shift)));
  }
  return v;
}

// One output row of a tile: the epilogue in registers when it can be, else after the store.
KILN_AVX512 inline void store_row(float* yr, int64_t n, const __mmask16* masks, const ir::Epilogue& ep, __m512 v0,
                                  __m512 v1, __m512 v2, __m512 v3) {
  const bool fused = epilogue_in_registers(ep);
  if (fused) {
    v0 = epilogue512(ep, v0), v1 = epilogue512(ep, v1), v2 = epilogue512(ep, v2), v3 = epilogue512(ep, v3);
  }
  _mm512_mask_storeu_ps(yr, masks[0], v0);
  _mm512_mask_storeu_ps(yr + 16, masks[1], v1);
  _mm512_mask_storeu_ps(yr + 32, masks[2], v2);
  _mm512_mask_storeu_ps(yr + 48, masks[3], v3);
  if (!fused) apply_epilogue_f32(ep, yr, n);
}

// Four output channels (w rows w0..w3, any of them may repeat a real row when fewer are left;
// only `rows` are stored) over n <= kTile positions. The sixteen accumulators are named
// variables: arrays of vectors indexed in loops are kept in memory by GCC, costing a store a step.
KILN_AVX512 void rows4_avx512(const float* w0, const float* w1, const float* w2, const float* w3, int64_t K,
                              const float* bias, int rows, const float* col, int64_t col_stride, int64_t n, float* y,
                              int64_t y_stride, const ir::Epilogue& ep) {
  const auto mask_of = [n](int v) {
    const int64_t left = std::clamp<int64_t>(n - v * 16, 0, 16);
    return static_cast<__mmask16>((1u << left) - 1u);
  };
  const __mmask16 m0 = mask_of(0), m1 = mask_of(1), m2 = mask_of(2), m3 = mask_of(3);
  float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int r = 0; r < rows && bias != nullptr; ++r) b[r] = bias[r];
  __m512 a00 = _mm512_set1_ps(b[0]), a01 = a00, a02 = a00, a03 = a00;
  __m512 a10 = _mm512_set1_ps(b[1]), a11 = a10, a12 = a10, a13 = a10;
  __m512 a20 = _mm512_set1_ps(b[2]), a21 = a20, a22 = a20, a23 = a20;
  __m512 a30 = _mm512_set1_ps(b[3]), a31 = a30, a32 = a30, a33 = a30;
  for (int64_t k = 0; k < K; ++k) {
    const float* xr = col + k * col_stride;
    const __m512 x0 = _mm512_maskz_loadu_ps(m0, xr), x1 = _mm512_maskz_loadu_ps(m1, xr + 16);
    const __m512 x2 = _mm512_maskz_loadu_ps(m2, xr + 32), x3 = _mm512_maskz_loadu_ps(m3, xr + 48);
    __m512 wv = _mm512_set1_ps(w0[k]);
    a00 = _mm512_fmadd_ps(wv, x0, a00), a01 = _mm512_fmadd_ps(wv, x1, a01);
    a02 = _mm512_fmadd_ps(wv, x2, a02), a03 = _mm512_fmadd_ps(wv, x3, a03);
    wv = _mm512_set1_ps(w1[k]);
    a10 = _mm512_fmadd_ps(wv, x0, a10), a11 = _mm512_fmadd_ps(wv, x1, a11);
    a12 = _mm512_fmadd_ps(wv, x2, a12), a13 = _mm512_fmadd_ps(wv, x3, a13);
    wv = _mm512_set1_ps(w2[k]);
    a20 = _mm512_fmadd_ps(wv, x0, a20), a21 = _mm512_fmadd_ps(wv, x1, a21);
    a22 = _mm512_fmadd_ps(wv, x2, a22), a23 = _mm512_fmadd_ps(wv, x3, a23);
    wv = _mm512_set1_ps(w3[k]);
    a30 = _mm512_fmadd_ps(wv, x0, a30), a31 = _mm512_fmadd_ps(wv, x1, a31);
    a32 = _mm512_fmadd_ps(wv, x2, a32), a33 = _mm512_fmadd_ps(wv, x3, a33);
  }
  const __mmask16 masks[4] = {m0, m1, m2, m3};
  store_row(y, n, masks, ep, a00, a01, a02, a03);
  if (rows > 1) store_row(y + y_stride, n, masks, ep, a10, a11, a12, a13);
  if (rows > 2) store_row(y + 2 * y_stride, n, masks, ep, a20, a21, a22, a23);
  if (rows > 3) store_row(y + 3 * y_stride, n, masks, ep, a30, a31, a32, a33);
}

#define KILN_AVX2 __attribute__((target("avx2,fma")))

// Six output channels (w rows w[0..5], repeating the last real row when fewer are left; only
// `rows` are stored) over one run of n <= 16 positions: 12 accumulators, the classic AVX2 shape
// (two position vectors loaded and six weights broadcast a step). `full`: n == 16, plain loads.
template <bool kFull>
KILN_AVX2 inline void rows6_run_avx2(const float* const* w, int64_t K, const float* b, int rows, const float* col,
                                     int64_t col_stride, int64_t n, float* y, int64_t y_stride) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - 8)), lane);
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int r = 0; r < 6; ++r) acc[r][0] = acc[r][1] = _mm256_set1_ps(b[r]);
  for (int64_t k = 0; k < K; ++k) {
    const float* xr = col + k * col_stride;
    const __m256 x0 = kFull ? _mm256_loadu_ps(xr) : _mm256_maskload_ps(xr, m0);
    const __m256 x1 = kFull ? _mm256_loadu_ps(xr + 8) : _mm256_maskload_ps(xr + 8, m1);
#pragma GCC unroll 6
    for (int r = 0; r < 6; ++r) {
      const __m256 wv = _mm256_broadcast_ss(w[r] + k);
      acc[r][0] = _mm256_fmadd_ps(wv, x0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(wv, x1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < 6; ++r) {
    if (r >= rows) break;
    if (kFull) {
      _mm256_storeu_ps(y + r * y_stride, acc[r][0]);
      _mm256_storeu_ps(y + r * y_stride + 8, acc[r][1]);
    } else {
      _mm256_maskstore_ps(y + r * y_stride, m0, acc[r][0]);
      _mm256_maskstore_ps(y + r * y_stride + 8, m1, acc[r][1]);
    }
  }
}

// Up to six output channels over n <= kTile positions, 16 at a time, then the epilogue.
KILN_AVX2 void rows6_avx2(const float* w, int64_t K, const float* bias, int rows, const float* col, int64_t col_stride,
                          int64_t n, float* y, int64_t y_stride, const ir::Epilogue& ep) {
  const float* wr[6];
  float b[6];
  for (int r = 0; r < 6; ++r) {
    const int real = std::min(r, rows - 1);
    wr[r] = w + real * K;
    b[r] = bias != nullptr ? bias[real] : 0.0f;
  }
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    if (n - j0 >= 16) {
      rows6_run_avx2<true>(wr, K, b, rows, col + j0, col_stride, 16, y + j0, y_stride);
    } else {
      rows6_run_avx2<false>(wr, K, b, rows, col + j0, col_stride, n - j0, y + j0, y_stride);
    }
  }
  for (int r = 0; r < rows; ++r) apply_epilogue_f32(ep, y + r * y_stride, n);
}

using RowsFn = void (*)(const float*, int64_t, const float*, const float*, int64_t, int64_t, float*, int64_t,
                        const ir::Epilogue&);

RowsFn portable_rows(int r) {
  switch (r) {
    case 4: return rows_portable<4>;
    case 3: return rows_portable<3>;
    case 2: return rows_portable<2>;
    default: return rows_portable<1>;
  }
}

}  // namespace

void conv_gemm_f32(const float* w, const float* bias, const float* x, const int64_t* taps, float* y,
                   const ConvGemmShape& s, const ir::Epilogue& ep) {
  const Isa isa = isa_active();
  const bool avx512 = isa >= Isa::kAvx512, avx2 = !avx512 && isa >= Isa::kAvx2;
  const int64_t step = avx2 ? 6 : kRows;  // output channels a pass over the tile
  const int64_t image_tiles = (s.P + kTile - 1) / kTile, tiles = s.images * image_tiles;
  // Too few tiles to keep every thread busy (few output positions): the output channels are
  // split too, in chunks of at least 16 (each chunk gathers its tile again).
  const int64_t want = 2 * static_cast<int64_t>(omp_get_max_threads());
  int64_t chunk = s.M;
  if (tiles < want && s.M > 16) {
    const int64_t chunks = std::min((want + tiles - 1) / tiles, (s.M + 15) / 16);
    chunk = ((s.M + chunks - 1) / chunks + step - 1) / step * step;
  }
  const int64_t chunks = (s.M + chunk - 1) / chunk;
  parallel_region(true, [&] {
    std::vector<float> col(taps != nullptr || s.window != nullptr ? static_cast<size_t>(s.K * kTile) : 0);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tiles * chunks; ++task) {
      const int64_t t = task / chunks, c = task % chunks, image = t / image_tiles;
      const int64_t p0 = t % image_tiles * kTile, n = std::min(kTile, s.P - p0);
      const float* xi = x + image * s.x_image;
      float* yi = y + image * s.y_image;
      const float* src = xi + p0;
      int64_t stride = s.in_sp;
      if (s.window != nullptr) {
        gather_tile_2d(xi, s, p0, n, col.data());
        src = col.data();
        stride = kTile;
      } else if (taps != nullptr) {
        gather_tile(xi, taps, s, p0, n, col.data());
        src = col.data();
        stride = kTile;
      }
      const int64_t m_end = std::min(s.M, (c + 1) * chunk);
      for (int64_t m = c * chunk; m < m_end; m += step) {
        const int r = static_cast<int>(std::min<int64_t>(step, m_end - m));
        const float* wm = w + m * s.K;
        float* ym = yi + m * s.P + p0;
        const float* bm = bias != nullptr ? bias + m : nullptr;
        if (avx512) {
          const auto row = [&](int i) { return wm + std::min(i, r - 1) * s.K; };
          rows4_avx512(row(0), row(1), row(2), row(3), s.K, bm, r, src, stride, n, ym, s.P, ep);
        } else if (avx2) {
          rows6_avx2(wm, s.K, bm, r, src, stride, n, ym, s.P, ep);
        } else {
          portable_rows(r)(wm, s.K, bm, src, stride, n, ym, s.P, ep);
        }
      }
    }
  });
}

}  // namespace kiln::cpu
