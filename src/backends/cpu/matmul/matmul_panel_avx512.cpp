// AVX-512 kernels for the panel weight formats (ir/weight_format.h). A 16-lane vector holds two
// panels side by side, so prefill-sized calls first rewrite the panels a task covers into
// per-thread scratch in that shape, then run register tiles over it:
//   Float panels (f16p8, bf16p8): a task's 4 panels (32 output columns) become float, [k][32],
//     in chunks of at most kFloatChunk column positions (a chunk and the tile's activation rows
//     stay in L2); 12 x 2 tiles of broadcast-FMAs run over each chunk, later chunks adding to y.
//   Integer panels (i8cp8, i4g32p8): a task's 2 panels become unsigned bytes, [k / 4][16][4]
//     (int8 w + 128, int4 nibbles w + 8, both exactly representable) and VNNI's vpdpbusd
//     multiplies 4 of them with 4 broadcast int8 activations per lane, summing in 32 bits;
//     offset * sum(x) is removed once per block of 32. The integer dot products equal the AVX2
//     kernels' exactly, and the float steps after them are the same operations in the same
//     order, so both ISAs give bit-identical results.
// Decode-sized calls stream each weight once and are memory bound: they run the AVX2 kernels.
// Compiled with a target pragma; only called when isa_active() >= Isa::kAvx512.
//
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/isa_target.h"
#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/matmul/matmul_tiling.h"
#include "backends/cpu/matmul/quantize_activations.h"

KILN_ISA_TARGET_BEGIN(KILN_ISA_FEATURES_AVX512)

namespace kiln::cpu::avx512 {
namespace {

using ir::WeightFormat;

constexpr int kPanel = 8;            // rows per panel
constexpr int64_t kMinTileRows = 4;  // below this, a call is decode-sized

// Lanes 0-7 from a, 8-15 from b.
__m512 join(__m256 a, __m256 b) { return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1); }
__m512i join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

__mmask16 lanes_mask(int panels) { return panels >= 2 ? __mmask16{0xffff} : __mmask16{0x00ff}; }

// ---- float panels ---------------------------------------------------------------------------

constexpr int kFloatTaskPanels = 4;    // 32 output columns: two vectors
constexpr int kFloatTileRows = 12;     // 24 accumulators
constexpr int64_t kFloatChunk = 2048;  // column positions per converted chunk (256 KiB)
constexpr int64_t kFloatLd = 2 * 16;   // floats per column position in the scratch

// Converts column positions [c0, c0 + kc) of `np` panels (panel_bytes apart, from w) into
// dst[kc][32] floats; panels past np read as zero.
template <WeightFormat kFormat>
void convert_float_chunk(const std::byte* w, size_t panel_bytes, int np, int64_t c0, int64_t kc, float* dst) {
  constexpr size_t kPosBytes = 2 * kPanel;  // one fp16 / bf16 value per row
  for (int pair = 0; pair < (np + 1) / 2; ++pair) {
    const std::byte* a = w + static_cast<size_t>(2 * pair) * panel_bytes + static_cast<size_t>(c0) * kPosBytes;
    const std::byte* b = 2 * pair + 1 < np ? a + panel_bytes : nullptr;
    float* out = dst + 16 * pair;
    if constexpr (kFormat == WeightFormat::kBF16Panel8) {
      // 32-bit lane j = {bf16 (j, c), bf16 (j, c + 1)}: a bf16 is the top half of its float.
      const __m512i hi_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
      for (int64_t c = 0; c < kc; c += 2) {
        const size_t off = static_cast<size_t>(c) * kPosBytes;
        const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + off));
        const __m256i vb = b != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + off))
                                        : _mm256_setzero_si256();
        const __m512i v = join(va, vb);
        _mm512_storeu_ps(out + c * kFloatLd, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
        _mm512_storeu_ps(out + (c + 1) * kFloatLd, _mm512_castsi512_ps(_mm512_and_si512(v, hi_half)));
      }
    } else {
      for (int64_t c = 0; c < kc; ++c) {
        const size_t off = static_cast<size_t>(c) * kPosBytes;
        const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + off));
        const __m128i vb = b != nullptr ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + off)) : _mm_setzero_si128();
        _mm512_storeu_ps(out + c * kFloatLd, join(_mm256_cvtph_ps(va), _mm256_cvtph_ps(vb)));
      }
    }
  }
}

// y[0:MR, 0:16 NZ] (+)= x[0:MR, 0:kc] · wf, wf = [kc][32] floats; `accumulate` adds to y,
// `bias` (may be null) is added before the store; the last vector stores only `last` lanes.
// The first prefetch.lines column positions each ask for one line of `prefetch` into L2.
template <int MR, int NZ>
void float_tile(const float* x, int64_t ldx, const float* wf, int64_t kc, float* y, int64_t ldy, bool accumulate,
                const float* bias, __mmask16 last, detail::PrefetchLines prefetch) {
  __m512 acc[MR][NZ];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) {
      const __mmask16 mask = z == NZ - 1 ? last : __mmask16{0xffff};
      acc[r][z] = accumulate ? _mm512_maskz_loadu_ps(mask, y + r * ldy + 16 * z) : _mm512_setzero_ps();
    }
  }
  for (int64_t i = 0; i < kc; ++i) {
    if (i < prefetch.lines) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch.first + detail::PrefetchLines::kLineFloats * i), _MM_HINT_T1);
    }
    __m512 wv[NZ];
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) wv[z] = _mm512_loadu_ps(wf + i * kFloatLd + 16 * z);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + i]);
#pragma GCC unroll 2
      for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_fmadd_ps(xb, wv[z], acc[r][z]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) {
      const __mmask16 mask = z == NZ - 1 ? last : __mmask16{0xffff};
      __m512 v = acc[r][z];
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + 16 * z));
      _mm512_mask_storeu_ps(y + r * ldy + 16 * z, mask, v);
    }
  }
}

template <int MR, int NZ>
void float_tile_edge(int mr, const float* x, int64_t ldx, const float* wf, int64_t kc, float* y, int64_t ldy,
                     bool accumulate, const float* bias, __mmask16 last, detail::PrefetchLines prefetch = {}) {
  if constexpr (MR > 1) {
    if (mr < MR) return float_tile_edge<MR - 1, NZ>(mr, x, ldx, wf, kc, y, ldy, accumulate, bias, last, prefetch);
  }
  float_tile<MR, NZ>(x, ldx, wf, kc, y, ldy, accumulate, bias, last, prefetch);
}

}  // namespace
}  // namespace kiln::cpu::avx512

namespace kiln::cpu::detail {

// See matmul_kernels.h.
void float_panel_rows_avx512(const float* x, int64_t ldx, int64_t rows, const float* wf, int64_t k, float* y,
                             int64_t ldy, int cols, const float* bias, bool accumulate, PrefetchLines prefetch) {
  using avx512::kFloatTileRows;
  const __mmask16 last = static_cast<__mmask16>((1u << (cols > 16 ? cols - 16 : cols)) - 1u);
  const int64_t tiles = ceil_div(rows, kFloatTileRows);
  for (int64_t i = 0; i < rows; i += kFloatTileRows) {
    const int mr = static_cast<int>(std::min<int64_t>(kFloatTileRows, rows - i));
    const PrefetchLines share = prefetch_share(prefetch, i / kFloatTileRows, tiles);
    if (cols > 16) {
      avx512::float_tile_edge<kFloatTileRows, 2>(mr, x + i * ldx, ldx, wf, k, y + i * ldy, ldy, accumulate, bias, last,
                                                 share);
    } else {
      avx512::float_tile_edge<kFloatTileRows, 1>(mr, x + i * ldx, ldx, wf, k, y + i * ldy, ldy, accumulate, bias, last,
                                                 share);
    }
  }
}

}  // namespace kiln::cpu::detail

namespace kiln::cpu::avx512 {
namespace {

template <WeightFormat kFormat>
void matmul_float_panel(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                        float* y) {
  if (m < kMinTileRows) return detail::matmul_avx2_panel_fn(kFormat)(x, m, k, w, n, bias, y);
  const size_t panel_bytes = static_cast<size_t>(k) * 2 * kPanel;
  // Equal chunks of at most kFloatChunk positions, even (bf16p8 holds positions in pairs).
  const int64_t chunks = detail::ceil_div(k, kFloatChunk);
  const int64_t chunk = detail::round_up(detail::ceil_div(k, chunks), 2);
  detail::Blocking bl;
  bl.mb = m;
  bl.nb = std::min<int64_t>(n, kFloatTaskPanels * kPanel);
  bl.kc = k;
  detail::matmul_parallel(m, n, bl, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int np = static_cast<int>((j1 - j0) / kPanel);
    const std::byte* wt = w + static_cast<size_t>(j0 / kPanel) * panel_bytes;
    auto* wf = static_cast<float*>(
        detail::matmul_scratch(static_cast<size_t>(chunk) * kFloatLd * sizeof(float), detail::kScratchPanel));
    const __mmask16 last = lanes_mask(np - (np > 2 ? 2 : 0));
    for (int64_t c0 = 0; c0 < k; c0 += chunk) {
      const int64_t kc = std::min(chunk, k - c0);
      convert_float_chunk<kFormat>(wt, panel_bytes, np, c0, kc, wf);
      const bool accumulate = c0 > 0;
      const float* bb = c0 + kc == k && bias != nullptr ? bias + j0 : nullptr;
      for (int64_t i = i0; i < i1; i += kFloatTileRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kFloatTileRows, i1 - i));
        float* yt = y + i * n + j0;
        if (np > 2) {
          float_tile_edge<kFloatTileRows, 2>(mr, x + i * k + c0, k, wf, kc, yt, n, accumulate, bb, last);
        } else {
          float_tile_edge<kFloatTileRows, 1>(mr, x + i * k + c0, k, wf, kc, yt, n, accumulate, bb, last);
        }
      }
    }
  });
}

// ---- integer panels -------------------------------------------------------------------------

constexpr int kIntTaskPanels = 2;  // 16 output columns: one vector
constexpr int kIntTileRows = 8;
constexpr size_t kSrcStepBytes = 32;  // one step of a source panel: 8 rows x 4 bytes
constexpr size_t kStepBytes = 64;     // one step of the scratch: 16 columns x 4 unsigned bytes
constexpr int kStepsPerBlock = kQ8Block / 4;

// The scratch of a task: per block of 32 column positions, 8 steps of 64 bytes, then (int4) the
// 16 columns' float scales; after the last block (int8) the 16 columns' float scales.
template <WeightFormat kFormat>
constexpr size_t packed_block_bytes() {
  return kStepsPerBlock * kStepBytes + (kFormat == WeightFormat::kI4Group32Panel8 ? 16 * sizeof(float) : 0);
}

// Rewrites `np` (1 or 2) panels, panel_bytes apart from w, as unsigned bytes (see the top).
template <WeightFormat kFormat>
void pack_int_panels(const std::byte* w, size_t panel_bytes, int np, int64_t blocks, std::byte* dst) {
  const std::byte* b_panel = np > 1 ? w + panel_bytes : nullptr;
  const auto load2 = [&](size_t off) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + off));
    const __m256i b = b_panel != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b_panel + off))
                                         : _mm256_setzero_si256();
    return join(a, b);
  };
  if constexpr (kFormat == WeightFormat::kI4Group32Panel8) {
    // Source block: 8 fp16 scales, then 4 steps whose byte 4j + t holds (j, 8s + t) in its low
    // nibble and (j, 8s + 4 + t) in its high nibble: step s gives scratch steps 2s and 2s + 1.
    constexpr size_t kSrcBlock = 16 + 4 * kSrcStepBytes;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int64_t b = 0; b < blocks; ++b) {
      const size_t src = static_cast<size_t>(b) * kSrcBlock;
      std::byte* out = dst + static_cast<size_t>(b) * packed_block_bytes<kFormat>();
      for (int s = 0; s < 4; ++s) {
        const __m512i q = load2(src + 16 + s * kSrcStepBytes);
        _mm512_storeu_si512(out + (2 * s) * kStepBytes, _mm512_and_si512(q, m4));
        _mm512_storeu_si512(out + (2 * s + 1) * kStepBytes, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
      }
      const __m128i sa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + src));
      const __m128i sb = b_panel != nullptr ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b_panel + src))
                                            : _mm_setzero_si128();
      _mm512_storeu_ps(out + kStepsPerBlock * kStepBytes, join(_mm256_cvtph_ps(sa), _mm256_cvtph_ps(sb)));
    }
  } else {
    // Source: k / 4 steps whose byte 4j + t holds (j, 4s + t), then 8 float scales.
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const int64_t steps = blocks * kStepsPerBlock;
    for (int64_t s = 0; s < steps; ++s) {
      _mm512_storeu_si512(dst + static_cast<size_t>(s) * kStepBytes,
                          _mm512_xor_si512(load2(static_cast<size_t>(s) * kSrcStepBytes), flip));
    }
    const size_t scales = static_cast<size_t>(steps) * kSrcStepBytes;
    const __m256 sa = _mm256_loadu_ps(reinterpret_cast<const float*>(w + scales));
    const __m256 sb = b_panel != nullptr ? _mm256_loadu_ps(reinterpret_cast<const float*>(b_panel + scales))
                                         : _mm256_setzero_ps();
    _mm512_storeu_ps(dst + static_cast<size_t>(steps) * kStepBytes, join(sa, sb));
  }
}

int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// R quantised activation rows (from row i) x the 16 packed columns; stores `last` lanes.
template <WeightFormat kFormat, int R>
void int_tile(const Q8Rows& xq, int64_t i, const std::byte* packed, int64_t blocks, float* y, int64_t ldy,
              const float* bias, __mmask16 last) {
  constexpr bool kInt4 = kFormat == WeightFormat::kI4Group32Panel8;
  constexpr int32_t kOffset = kInt4 ? 8 : 128;
  const int64_t qs = xq.q_stride();
  __m512 accf[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) accf[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* blk = packed + static_cast<size_t>(b) * packed_block_bytes<kFormat>();
    __m512i acc[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < kStepsPerBlock; ++s) {
      const __m512i wv = _mm512_loadu_si512(blk + s * kStepBytes);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_set1_epi32(load_i32(xq.q + (i + r) * qs + b * kQ8Block + 4 * s));
        acc[r] = _mm512_dpbusd_epi32(acc[r], wv, xv);
      }
    }
    __m512 dw = _mm512_setzero_ps();
    if constexpr (kInt4) dw = _mm512_loadu_ps(reinterpret_cast<const float*>(blk + kStepsPerBlock * kStepBytes));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int64_t e = (i + r) * xq.blocks + b;
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r], _mm512_set1_epi32(kOffset * xq.sum[e])));
      if constexpr (kInt4) {
        accf[r] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, _mm512_set1_ps(xq.d[e])), accf[r]);
      } else {
        accf[r] = _mm512_fmadd_ps(dot, _mm512_set1_ps(xq.d[e]), accf[r]);
      }
    }
  }
  __m512 scale = _mm512_set1_ps(1.0f);
  if constexpr (!kInt4) {
    scale = _mm512_loadu_ps(reinterpret_cast<const float*>(packed + static_cast<size_t>(blocks) * kStepsPerBlock * kStepBytes));
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    // As the AVX2 kernels: int8 scales and adds the bias in one fused step.
    __m512 v = accf[r];
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(last, bias) : _mm512_setzero_ps();
    if constexpr (kInt4) {
      if (bias != nullptr) v = _mm512_add_ps(v, b);
    } else {
      v = bias != nullptr ? _mm512_fmadd_ps(v, scale, b) : _mm512_mul_ps(v, scale);
    }
    _mm512_mask_storeu_ps(y + r * ldy, last, v);
  }
}

template <WeightFormat kFormat, int R>
void int_tile_edge(int r, const Q8Rows& xq, int64_t i, const std::byte* packed, int64_t blocks, float* y,
                   int64_t ldy, const float* bias, __mmask16 last) {
  if constexpr (R > 1) {
    if (r < R) return int_tile_edge<kFormat, R - 1>(r, xq, i, packed, blocks, y, ldy, bias, last);
  }
  int_tile<kFormat, R>(xq, i, packed, blocks, y, ldy, bias, last);
}

// x: [m, k] float; w: [n, k] in kFormat (n % 8 == 0, k % 32 == 0); y: [m, n].
template <WeightFormat kFormat>
void matmul_int_panel(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                      float* y) {
  if (m < kMinTileRows) return detail::matmul_avx2_panel_fn(kFormat)(x, m, k, w, n, bias, y);
  const size_t panel_bytes = kPanel * ir::weight_format_row_bytes(kFormat, k);
  const int64_t blocks = k / kQ8Block;
  const size_t packed_bytes = static_cast<size_t>(blocks) * packed_block_bytes<kFormat>() + 16 * sizeof(float);
  detail::Blocking bl;
  bl.mb = m;
  bl.nb = std::min<int64_t>(n, kIntTaskPanels * kPanel);
  bl.kc = k;
  const Q8Rows xq =
      q8_rows_view(detail::matmul_scratch(q8_rows_bytes(m, k), detail::kScratchActivations), m, k);
  const auto quantize = [&] {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < m; ++r) q8_quantize_row(x + r * k, r, xq, Isa::kAvx2);
  };
  detail::matmul_parallel(m, n, bl, quantize, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int np = static_cast<int>((j1 - j0) / kPanel);
    auto* packed = static_cast<std::byte*>(detail::matmul_scratch(packed_bytes, detail::kScratchPanel));
    pack_int_panels<kFormat>(w + static_cast<size_t>(j0 / kPanel) * panel_bytes, panel_bytes, np, blocks, packed);
    const float* bb = bias != nullptr ? bias + j0 : nullptr;
    const __mmask16 last = lanes_mask(np);
    for (int64_t i = i0; i < i1; i += kIntTileRows) {
      const int r = static_cast<int>(std::min<int64_t>(kIntTileRows, i1 - i));
      int_tile_edge<kFormat, kIntTileRows>(r, xq, i, packed, blocks, y + i * n + j0, n, bb, last);
    }
  });
}

constexpr MatmulKernel kKernels[] = {
    {"f16p8.avx512.panel", WeightFormat::kF16Panel8, Isa::kAvx512, matmul_float_panel<WeightFormat::kF16Panel8>},
    {"bf16p8.avx512.panel", WeightFormat::kBF16Panel8, Isa::kAvx512, matmul_float_panel<WeightFormat::kBF16Panel8>},
    {"i8cp8.avx512.panel", WeightFormat::kI8ChannelPanel8, Isa::kAvx512,
     matmul_int_panel<WeightFormat::kI8ChannelPanel8>},
    {"i4g32p8.avx512.panel", WeightFormat::kI4Group32Panel8, Isa::kAvx512,
     matmul_int_panel<WeightFormat::kI4Group32Panel8>},
};

}  // namespace
}  // namespace kiln::cpu::avx512

KILN_ISA_TARGET_END()

namespace kiln::cpu::detail {
std::span<const MatmulKernel> matmul_kernels_avx512_panel() { return avx512::kKernels; }
}  // namespace kiln::cpu::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
