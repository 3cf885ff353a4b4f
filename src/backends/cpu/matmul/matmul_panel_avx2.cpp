// AVX2 kernels for the panel weight formats (ir/weight_format.h): 8 weight rows interleaved, so
// one vector holds one column position of 8 output columns and no horizontal sums are needed.
//   Float panels (f16p8, bf16p8): an activation is broadcast and multiplied with 8 converted
//     weights; a tile keeps MR rows x NP panels of accumulators (6 x 2 for prefill, the classic
//     AVX2 shape: 12 accumulators, 2 weight vectors, 1 broadcast); decode runs one row over 4
//     panels. Every output is one FMA chain over k in order, in both.
//   Integer panels (i8cp8, i4g32p8): activations are quantised to int8 per block of 32
//     (quantize_activations.h); 4 consecutive activations are broadcast to every 32-bit lane
//     and vpmaddubsw multiplies them with 4 weights of each of the 8 rows, so each lane
//     accumulates one output column. int4 nibbles are unsigned (w + 8): their products (at most
//     2 * 15 * 127 per 16-bit lane and step) sum in 16 bits over a whole block of 8 steps, and
//     8 * sum(x) is subtracted once per block. int8 weights use |w| * sign(x, w) and widen to
//     32 bits every step. One float conversion and one scale FMA per block serve 8 outputs.
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

constexpr int kPanel = 8;           // rows per panel = output columns per vector
constexpr size_t kStepBytes = 32;   // one vector of panel data

// Decode streams each weight once, doing little arithmetic per byte: asking for the bytes
// kPrefetchBytes ahead keeps more cache misses in flight than the hardware prefetcher alone
// (the panels a thread reads are consecutive, so "ahead" is the data it reads next).
constexpr size_t kPrefetchBytes = 4096;
void prefetch_ahead(const std::byte* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + off), _MM_HINT_T0);
  }
}

// ---- float panels ---------------------------------------------------------------------------

// A loader reads column position t (< kSteps) of a unit of kSteps positions (16 * kSteps bytes
// of one panel) as 8 floats.
struct PanelF16 {
  static constexpr int kSteps = 1;
  static constexpr size_t kPosBytes = 2 * kPanel;
  static __m256 load(const std::byte* p, int /*t*/) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};
struct PanelBF16 {  // lane j = {bf16 (j, c), bf16 (j, c + 1)}: a bf16 is the top half of its float
  static constexpr int kSteps = 2;
  static constexpr size_t kPosBytes = 2 * kPanel;
  static __m256 load(const std::byte* p, int t) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_castsi256_ps(t == 0 ? _mm256_slli_epi32(v, 16)
                                      : _mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};
struct PanelF32 {  // a panel already converted to float (per-thread scratch)
  static constexpr int kSteps = 1;
  static constexpr size_t kPosBytes = 4 * kPanel;
  static __m256 load(const std::byte* p, int /*t*/) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};

// y[0:MR, 0:8 NP] = (y if accumulate, else 0) + x[0:MR, 0:kc] · W^T (+ bias) for the NP panels
// starting at w (already offset to the chunk's first column position; panels pstride bytes
// apart, L::kPosBytes per column position; their outputs and biases ystride floats apart). Each
// output is one FMA chain over the kc steps in order.
template <class L, int MR, int NP>
void float_panel_tile(const float* x, int64_t ldx, const std::byte* w, size_t pstride, int64_t kc, float* y,
                      int64_t ldy, const float* bias, int64_t ystride, bool accumulate) {
  constexpr size_t kPos = L::kPosBytes;  // bytes per column position
  constexpr int S = L::kSteps;           // column positions per load
  __m256 acc[MR][NP];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      acc[r][p] = accumulate ? _mm256_loadu_ps(y + r * ldy + p * ystride) : _mm256_setzero_ps();
    }
  for (int64_t i = 0; i < kc; i += S) {  // kc is a multiple of S (bf16p8 needs even k)
    if constexpr (MR == 1) {
#pragma GCC unroll 8
      for (int p = 0; p < NP; ++p) prefetch_ahead(w + p * pstride + static_cast<size_t>(i) * kPos, S * kPos);
    }
#pragma GCC unroll 8
    for (int t = 0; t < S; ++t) {
      __m256 wv[NP];
#pragma GCC unroll 8
      for (int p = 0; p < NP; ++p) wv[p] = L::load(w + p * pstride + static_cast<size_t>(i) * kPos, t);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m256 xb = _mm256_broadcast_ss(x + r * ldx + i + t);
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) acc[r][p] = _mm256_fmadd_ps(xb, wv[p], acc[r][p]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      __m256 v = acc[r][p];
      if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + p * ystride));
      _mm256_storeu_ps(y + r * ldy + p * ystride, v);
    }
  }
}

// float_panel_tile for mr <= MR rows and np <= NP panels.
template <class L, int MR, int NP>
void float_panel_tile_edge(int mr, int np, const float* x, int64_t ldx, const std::byte* w, size_t pstride,
                           int64_t kc, float* y, int64_t ldy, const float* bias, int64_t ystride = kPanel,
                           bool accumulate = false) {
  if constexpr (MR > 1) {
    if (mr < MR) {
      return float_panel_tile_edge<L, MR - 1, NP>(mr, np, x, ldx, w, pstride, kc, y, ldy, bias, ystride, accumulate);
    }
  }
  if constexpr (NP > 1) {
    if (np < NP) {
      return float_panel_tile_edge<L, MR, NP - 1>(mr, np, x, ldx, w, pstride, kc, y, ldy, bias, ystride, accumulate);
    }
  }
  float_panel_tile<L, MR, NP>(x, ldx, w, pstride, kc, y, ldy, bias, ystride, accumulate);
}

// Decode-sized calls (m < kMinTileRows) run each row alone over kDecodePanels panels. Each
// output is the same FMA chain over k as in the tiles of larger calls, so a row gets the same bits
// alone as in a batch (accumulators split over k would sum it in another order). The panels are
// read as four long streams, one per quarter of the matrix: a task's panels lie a quarter apart,
// so a thread's consecutive tasks continue each stream, and the prefetch ahead of a panel's end
// lands in the panel that the stream reads next. (Tasks of four adjacent panels restart four
// streams every task: at k = 2048 that streamed 15-25% slower.) Larger calls run 6 x 2 tiles over
// all of k: a task is one panel pair, converted to float once into per-thread scratch (k x 64
// bytes, kept in L2), against every row of x, so the tiles' inner loop is loads, broadcasts and
// FMAs only.
constexpr int64_t kMinTileRows = 4;
constexpr int kDecodePanels = 4;
constexpr int kTileRows = 6;
constexpr int kTilePanels = 2;

template <class L>
void matmul_float_panel(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                        float* y) {
  const size_t panel_bytes = static_cast<size_t>(k) * 2 * kPanel;
  detail::Blocking bl;
  bl.mb = m;
  bl.kc = k;
  if (m < kMinTileRows) {
    // The panels form kDecodePanels streams of `q` consecutive panels; task t reads panel t of
    // each, so a thread's consecutive tasks continue every stream where it stopped.
    const int64_t panels = n / kPanel;
    const int64_t q = detail::ceil_div(panels, kDecodePanels);
    bl.nb = kPanel;
    detail::matmul_parallel(m, q * kPanel, bl, [&](int64_t i0, int64_t i1, int64_t j0, int64_t /*j1*/) {
      const int64_t t = j0 / kPanel;
      const int np = static_cast<int>(std::min<int64_t>(kDecodePanels, detail::ceil_div(panels - t, q)));
      const std::byte* wb = w + static_cast<size_t>(t) * panel_bytes;
      const float* bb = bias != nullptr ? bias + t * kPanel : nullptr;
      for (int64_t i = i0; i < i1; ++i) {
        float_panel_tile_edge<L, 1, kDecodePanels>(1, np, x + i * k, k, wb, q * panel_bytes, k,
                                                                y + i * n + t * kPanel, n, bb, q * kPanel);
      }
    });
    return;
  }
  bl.nb = std::min<int64_t>(n, kTilePanels * kPanel);
  const size_t f32_panel_bytes = static_cast<size_t>(k) * PanelF32::kPosBytes;
  detail::matmul_parallel(m, n, bl, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    // The task's panels, converted to float once and reused by every row tile.
    const int np = static_cast<int>((j1 - j0) / kPanel);
    auto* f32 = static_cast<std::byte*>(detail::matmul_scratch(kTilePanels * f32_panel_bytes, detail::kScratchPanel));
    for (int p = 0; p < np; ++p) {
      const std::byte* src = w + static_cast<size_t>(j0 / kPanel + p) * panel_bytes;
      auto* dst = reinterpret_cast<float*>(f32 + p * f32_panel_bytes);
      for (int64_t c = 0; c < k; c += L::kSteps) {
#pragma GCC unroll 2
        for (int t = 0; t < L::kSteps; ++t) {
          _mm256_storeu_ps(dst + (c + t) * kPanel, L::load(src + static_cast<size_t>(c) * L::kPosBytes, t));
        }
      }
    }
    const float* bb = bias != nullptr ? bias + j0 : nullptr;
    for (int64_t i = i0; i < i1; i += kTileRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kTileRows, i1 - i));
      float_panel_tile_edge<PanelF32, kTileRows, kTilePanels>(mr, np, x + i * k, k, f32, f32_panel_bytes, k,
                                                                 y + i * n + j0, n, bb);
    }
  });
}

// The packed weights of general graphs (ir/packed_weight.h): 32 floats a column position, i.e.
// four float panels side by side.
struct PanelF32Packed {
  static constexpr int kSteps = 1;
  static constexpr size_t kPosBytes = 4 * 4 * kPanel;
  static __m256 load(const std::byte* p, int /*t*/) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};

}  // namespace
}  // namespace kiln::cpu::avx2

namespace kiln::cpu::detail {

// See matmul_kernels.h. Each half of the 32 columns runs 6 x 2 tiles; a half with fewer than 16
// columns goes through a scratch tile (the tiles load and store whole vectors).
void float_panel_rows_avx2(const float* x, int64_t ldx, int64_t rows, const float* wf, int64_t k, float* y,
                           int64_t ldy, int cols, const float* bias, bool accumulate, PrefetchLines /*prefetch*/) {
  using avx2::kPanel;
  using avx2::kTileRows;
  using L = avx2::PanelF32Packed;
  constexpr size_t kPanelStride = kPanel * sizeof(float);  // the next 8 columns of a position
  const auto* w = reinterpret_cast<const std::byte*>(wf);
  for (int h = 0; 16 * h < cols; ++h) {
    const int hc = std::min(16, cols - 16 * h);
    const std::byte* wh = w + 2 * h * kPanelStride;
    const float* bh = bias != nullptr ? bias + 16 * h : nullptr;
    float* yh = y + 16 * h;
    if (hc == 16) {
      for (int64_t i = 0; i < rows; i += kTileRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kTileRows, rows - i));
        avx2::float_panel_tile_edge<L, kTileRows, 2>(mr, 2, x + i * ldx, ldx, wh, kPanelStride, k, yh + i * ldy, ldy,
                                                     bh, kPanel, accumulate);
      }
      continue;
    }
    float bpad[16] = {};
    if (bh != nullptr) std::copy(bh, bh + hc, bpad);
    float tile[kTileRows * 16] = {};
    const int np = (hc + kPanel - 1) / kPanel;
    for (int64_t i = 0; i < rows; i += kTileRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kTileRows, rows - i));
      for (int r = 0; r < mr && accumulate; ++r) std::copy(yh + (i + r) * ldy, yh + (i + r) * ldy + hc, tile + r * 16);
      avx2::float_panel_tile_edge<L, kTileRows, 2>(mr, np, x + i * ldx, ldx, wh, kPanelStride, k, tile, 16,
                                                   bh != nullptr ? bpad : nullptr, kPanel, accumulate);
      for (int r = 0; r < mr; ++r) std::copy(tile + r * 16, tile + r * 16 + hc, yh + (i + r) * ldy);
    }
  }
}

}  // namespace kiln::cpu::detail

namespace kiln::cpu::avx2 {
namespace {

// ---- integer panels -------------------------------------------------------------------------

int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// i4g32p8: R quantised activation rows (from row i) x one panel of `blocks` blocks of 144 bytes
// (8 fp16 scales, then 4 steps of 32 nibble-pair bytes).
template <int R>
void i4_panel_tile(const Q8Rows& xq, int64_t i, const std::byte* panel, int64_t blocks, float* y, int64_t ldy,
                   const float* bias) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t qs = xq.q_stride();
  __m256 accf[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) accf[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* blk = panel + static_cast<size_t>(b) * (16 + 4 * kStepBytes);
    if constexpr (R == 1) prefetch_ahead(blk, 16 + 4 * kStepBytes);
    __m256i acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + s * kStepBytes));
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xq.q + (i + r) * qs + b * kQ8Block + 8 * s;
        acc[r] = _mm256_add_epi16(acc[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load_i32(xr))));
        acc[r] = _mm256_add_epi16(acc[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load_i32(xr + 4))));
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int64_t e = (i + r) * xq.blocks + b;
      const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(acc[r], ones), _mm256_set1_epi32(8 * xq.sum[e]));
      accf[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(xq.d[e])), accf[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m256 v = accf[r];
    if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias));
    _mm256_storeu_ps(y + r * ldy, v);
  }
}

// i8cp8: R quantised activation rows x one panel: k / 4 steps of 32 bytes, then 8 float scales.
template <int R>
void i8_panel_tile(const Q8Rows& xq, int64_t i, const std::byte* panel, int64_t blocks, float* y, int64_t ldy,
                   const float* bias) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t qs = xq.q_stride();
  __m256 accf[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) accf[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* blk = panel + static_cast<size_t>(b) * 8 * kStepBytes;
    if constexpr (R == 1) prefetch_ahead(blk, 8 * kStepBytes);
    __m256i acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + s * kStepBytes));
      const __m256i aw = _mm256_abs_epi8(wq);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i xv = _mm256_set1_epi32(load_i32(xq.q + (i + r) * qs + b * kQ8Block + 4 * s));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wq)), ones));
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      accf[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), _mm256_set1_ps(xq.d[(i + r) * xq.blocks + b]), accf[r]);
    }
  }
  const __m256 scale = _mm256_loadu_ps(reinterpret_cast<const float*>(panel + static_cast<size_t>(blocks) * 8 * kStepBytes));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // One explicit fused step, so that every ISA rounds alike whatever the compiler contracts.
    const __m256 v = bias != nullptr ? _mm256_fmadd_ps(accf[r], scale, _mm256_loadu_ps(bias)) : _mm256_mul_ps(accf[r], scale);
    _mm256_storeu_ps(y + r * ldy, v);
  }
}

template <WeightFormat kFormat, int R>
void int_panel_tile(const Q8Rows& xq, int64_t i, const std::byte* panel, int64_t blocks, float* y, int64_t ldy,
                    const float* bias) {
  if constexpr (kFormat == WeightFormat::kI4Group32Panel8) {
    i4_panel_tile<R>(xq, i, panel, blocks, y, ldy, bias);
  } else {
    i8_panel_tile<R>(xq, i, panel, blocks, y, ldy, bias);
  }
}

template <WeightFormat kFormat, int R>
void int_panel_tile_edge(int r, const Q8Rows& xq, int64_t i, const std::byte* panel, int64_t blocks, float* y,
                         int64_t ldy, const float* bias) {
  if constexpr (R > 1) {
    if (r < R) return int_panel_tile_edge<kFormat, R - 1>(r, xq, i, panel, blocks, y, ldy, bias);
  }
  int_panel_tile<kFormat, R>(xq, i, panel, blocks, y, ldy, bias);
}

// x: [m, k] float; w: [n, k] in kFormat (n % 8 == 0, k % 32 == 0); y: [m, n]. Each task is one
// panel over every row of x, R rows at a time: the panel (9 KiB of int4 at k = 2048) stays in L1.
template <WeightFormat kFormat, int R>
void matmul_int_panel(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                      float* y) {
  const size_t panel_bytes = kPanel * ir::weight_format_row_bytes(kFormat, k);
  const int64_t blocks = k / kQ8Block;
  detail::Blocking bl;
  bl.mb = m;
  bl.nb = kPanel;
  bl.kc = k;
  const Q8Rows xq =
      q8_rows_view(detail::matmul_scratch(q8_rows_bytes(m, k), detail::kScratchActivations), m, k);
  const auto quantize = [&] {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < m; ++r) q8_quantize_row(x + r * k, r, xq, Isa::kAvx2);
  };
  detail::matmul_parallel(m, n, bl, quantize, [&](int64_t i0, int64_t i1, int64_t j0, int64_t /*j1*/) {
    const std::byte* panel = w + static_cast<size_t>(j0 / kPanel) * panel_bytes;
    const float* bb = bias != nullptr ? bias + j0 : nullptr;
    for (int64_t i = i0; i < i1; i += R) {
      const int r = static_cast<int>(std::min<int64_t>(R, i1 - i));
      int_panel_tile_edge<kFormat, R>(r, xq, i, panel, blocks, y + i * n + j0, n, bb);
    }
  });
}

constexpr MatmulKernel kKernels[] = {
    {"f16p8.avx2.panel", WeightFormat::kF16Panel8, Isa::kAvx2, matmul_float_panel<PanelF16>},
    {"bf16p8.avx2.panel", WeightFormat::kBF16Panel8, Isa::kAvx2, matmul_float_panel<PanelBF16>},
    {"i8cp8.avx2.panel", WeightFormat::kI8ChannelPanel8, Isa::kAvx2, matmul_int_panel<WeightFormat::kI8ChannelPanel8, 4>},
    {"i4g32p8.avx2.panel", WeightFormat::kI4Group32Panel8, Isa::kAvx2,
     matmul_int_panel<WeightFormat::kI4Group32Panel8, 4>},
};

}  // namespace
}  // namespace kiln::cpu::avx2

KILN_ISA_TARGET_END()

namespace kiln::cpu::detail {
std::span<const MatmulKernel> matmul_kernels_avx2_panel() { return avx2::kKernels; }

MatmulFn matmul_avx2_panel_fn(ir::WeightFormat format) {
  for (const MatmulKernel& kernel : avx2::kKernels) {
    if (kernel.format == format) return kernel.fn;
  }
  KILN_CHECK(false && "no AVX2 kernel for this panel format");
  return nullptr;
}
}  // namespace kiln::cpu::detail
