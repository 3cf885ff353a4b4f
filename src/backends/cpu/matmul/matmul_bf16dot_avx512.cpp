// bf16 dot-product kernel for bf16p8 weights (AVX512_BF16): vdpbf16ps multiplies pairs of bf16
// values and adds both products to a float lane, twice the multiply rate of float FMAs.
//
// The weights need no conversion: bf16p8 already holds two consecutive column positions of
// one row in each 32-bit lane, exactly the operand vdpbf16ps takes. The activations are rounded
// to bf16 (to nearest even) once per call, as llama.cpp does for its BF16 type and as a model
// running in bf16 does everywhere; this adds at most 2^-8 * sum_t |x_t * w_t| to each output
// (the kernel is a candidate that `kiln build` times, not the default, for that reason).
//
// Prefill-sized calls pack a task's 4 panels (32 output columns) into [k / 2][32] lanes, two
// vectors per position pair, and run 12 x 2 tiles: per pair of positions, 2 weight loads, 12
// broadcasts of an activation pair and 24 vdpbf16ps. Blocks of fewer than 128 rows (a batch of
// decode rows, a short prompt chunk) read the panels in place instead, two half-vector loads per
// weight vector: there the copy cost as much as the products (AMD EPYC, 2 threads: 2048 x 384
// at m = 16 42 us against 49-59, at m = 64 131 against 141). Decode-sized calls take the same
// in-place path: every output is the same chain of vdpbf16ps over k whatever m is, so a row gets
// the same bits alone as in a batch.
//
// Plain bf16 weights (rows that an embedding lookup also reads, such as a tied lm_head, or a
// layout the build timed faster at decode) take the product along k instead: a 6 x 4 tile of
// activation rows by weight rows loads 32 positions of each and runs 24 vdpbf16ps, and each of
// the 24 lane vectors is summed at the end, four at a time through one shuffle tree. No
// packing, so it serves every m. Compiled with a target pragma; only called when
// isa_active() >= Isa::kAvx512Bf16.
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

KILN_ISA_TARGET_BEGIN(KILN_ISA_FEATURES_AVX512BF16)

namespace kiln::cpu::avx512bf16 {
namespace {

using ir::WeightFormat;

constexpr int kPanel = 8;
constexpr int kTaskPanels = 4;     // 32 output columns: two vectors
constexpr int kTileRows = 12;      // 24 accumulators
constexpr int64_t kPairLanes = 32;  // 32-bit lanes per position pair in the packed panels
constexpr int64_t kPackMinRows = 128;  // blocks with fewer rows read the panels in place

// x row (k floats, k even) -> k bf16, rounded to nearest even.
void round_row_to_bf16(const float* x, int64_t k, uint16_t* out) {
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + c));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), reinterpret_cast<const __m256i&>(b));
  }
  if (c < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - c)) - 1);
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + c));
    _mm256_mask_storeu_epi16(out + c, mask, reinterpret_cast<const __m256i&>(b));
  }
}

// The calling thread's buffer for m rows of k bf16 activations, shared with the call's threads.
uint16_t* activation_scratch(int64_t m, int64_t k) {
  return static_cast<uint16_t*>(
      detail::matmul_scratch(static_cast<size_t>(m * k) * sizeof(uint16_t), detail::kScratchActivations));
}

// Rounds the rows of x [m, k] into xb, shared among the threads of the enclosing parallel region
// (a matmul_parallel prologue).
void round_rows_to_bf16(const float* x, int64_t m, int64_t k, uint16_t* xb) {
#pragma omp for schedule(static) nowait
  for (int64_t r = 0; r < m; ++r) round_row_to_bf16(x + r * k, k, xb + r * k);
}

// Copies `np` panels (panel_bytes apart) into dst[k / 2][32 lanes]; panels past np are zero.
void pack_panels(const std::byte* w, size_t panel_bytes, int np, int64_t k, uint32_t* dst) {
  constexpr size_t kPairBytes = 4 * kPanel;  // one position pair of one panel
  for (int p = 0; p < kTaskPanels; ++p) {
    const std::byte* src = w + static_cast<size_t>(p) * panel_bytes;
    for (int64_t c = 0; c < k / 2; ++c) {
      const __m256i v = p < np ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + c * kPairBytes))
                               : _mm256_setzero_si256();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * kPairLanes + p * kPanel), v);
    }
  }
}

uint32_t load_pair(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The weights of one position pair of a task, 16 lanes per vector: from the packed copy, or
// straight from the panels (two panels of 8 lanes per vector; panels past the task's are zero).
struct PackedPairs {
  const uint32_t* packed;
  __m512i load(int64_t c, int z) const { return _mm512_loadu_si512(packed + c * kPairLanes + 16 * z); }
};

struct PanelPairs {
  const std::byte* w;  // the task's first panel
  size_t panel_bytes;
  int np;
  __m512i load(int64_t c, int z) const {
    const std::byte* p = w + static_cast<size_t>(2 * z) * panel_bytes + static_cast<size_t>(c) * 32;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i hi = 2 * z + 1 < np ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + panel_bytes))
                                      : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
};

// y[0:MR, 0:16 NZ] = (bias) + xb[0:MR, 0:k] · weights; the last vector stores `last` lanes.
template <int MR, int NZ, class Pairs>
void tile(const uint16_t* xb, int64_t k, const Pairs& pairs, float* y, int64_t ldy, const float* bias,
          __mmask16 last) {
  __m512 acc[MR][NZ];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < k / 2; ++c) {
    __m512bh wv[NZ];
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) {
      const __m512i v = pairs.load(c, z);
      wv[z] = reinterpret_cast<const __m512bh&>(v);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512i xv = _mm512_set1_epi32(static_cast<int>(load_pair(xb + r * k + 2 * c)));
#pragma GCC unroll 2
      for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_dpbf16_ps(acc[r][z], reinterpret_cast<const __m512bh&>(xv), wv[z]);
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

template <int MR, int NZ, class Pairs>
void tile_edge(int mr, const uint16_t* xb, int64_t k, const Pairs& pairs, float* y, int64_t ldy,
               const float* bias, __mmask16 last) {
  if constexpr (MR > 1) {
    if (mr < MR) return tile_edge<MR - 1, NZ>(mr, xb, k, pairs, y, ldy, bias, last);
  }
  tile<MR, NZ>(xb, k, pairs, y, ldy, bias, last);
}

// All rows of a task's block, 12 at a time.
template <class Pairs>
void task_rows(int64_t i0, int64_t i1, const uint16_t* xb, int64_t k, const Pairs& pairs, int np, float* y,
               int64_t n, const float* bias) {
  const int lanes_last = np > 2 ? np - 2 : np;
  const __mmask16 last = lanes_last >= 2 ? __mmask16{0xffff} : __mmask16{0x00ff};
  for (int64_t i = i0; i < i1; i += kTileRows) {
    const int mr = static_cast<int>(std::min<int64_t>(kTileRows, i1 - i));
    float* yt = y + i * n;
    if (np > 2) {
      tile_edge<kTileRows, 2>(mr, xb + i * k, k, pairs, yt, n, bias, last);
    } else {
      tile_edge<kTileRows, 1>(mr, xb + i * k, k, pairs, yt, n, bias, last);
    }
  }
}

void matmul_bf16dot(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                    float* y) {
  const size_t panel_bytes = static_cast<size_t>(k) * 2 * kPanel;
  uint16_t* xb = activation_scratch(m, k);
  detail::Blocking bl;
  bl.mb = m;
  bl.nb = std::min<int64_t>(n, kTaskPanels * kPanel);
  bl.kc = k;
  const auto round_rows = [&] { round_rows_to_bf16(x, m, k, xb); };
  detail::matmul_parallel(m, n, bl, round_rows, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int np = static_cast<int>((j1 - j0) / kPanel);
    const std::byte* panels = w + static_cast<size_t>(j0 / kPanel) * panel_bytes;
    const float* bb = bias != nullptr ? bias + j0 : nullptr;
    if (i1 - i0 < kPackMinRows) {
      // Few rows: packing would cost about as much as the products; read the panels in place.
      return task_rows(i0, i1, xb, k, PanelPairs{panels, panel_bytes, np}, np, y + j0, n, bb);
    }
    auto* packed = static_cast<uint32_t*>(
        detail::matmul_scratch(static_cast<size_t>(k / 2 * kPairLanes) * sizeof(uint32_t), detail::kScratchPanel));
    pack_panels(panels, panel_bytes, np, k, packed);
    task_rows(i0, i1, xb, k, PackedPairs{packed}, np, y + j0, n, bb);
  });
}

// ---- Plain bf16 rows: the product along k. ----

constexpr int kRowTileX = 6;  // activation rows per tile
constexpr int kRowTileW = 4;  // weight rows per tile: one shuffle tree sums the four
constexpr int kPrefetchTiles = 2;  // weight tiles fetched ahead of the one in use

// {sum(a0), sum(a1), sum(a2), sum(a3)}: halves, then quarters, then lanes within a quarter.
__m128 sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
  __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4E));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xB1));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// y[0:MR, 0:NR] = (bias) + xb[0:MR, 0:k] · w[0:NR, 0:k]^T; rows of both are k bf16 apart.
template <int MR, int NR>
void row_tile(const uint16_t* xb, int64_t k, const uint16_t* w, float* y, int64_t ldy, const float* bias) {
  __m512 acc[MR][kRowTileW];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int z = 0; z < kRowTileW; ++z) acc[r][z] = _mm512_setzero_ps();
  }
  const auto step = [&](int64_t c, __mmask32 mask) {
    __m512i wv[NR];
#pragma GCC unroll 4
    for (int z = 0; z < NR; ++z) wv[z] = _mm512_maskz_loadu_epi16(mask, w + z * k + c);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512i xv = _mm512_maskz_loadu_epi16(mask, xb + r * k + c);
#pragma GCC unroll 4
      for (int z = 0; z < NR; ++z) {
        acc[r][z] = _mm512_dpbf16_ps(acc[r][z], reinterpret_cast<const __m512bh&>(xv),
                                     reinterpret_cast<const __m512bh&>(wv[z]));
      }
    }
  };
  int64_t c = 0;
  for (; c + 32 <= k; c += 32) step(c, ~__mmask32{0});
  if (c < k) step(c, static_cast<__mmask32>((uint64_t{1} << (k - c)) - 1));
  constexpr auto kMask = static_cast<__mmask8>((1u << NR) - 1);
  const __m128 b = bias != nullptr ? _mm_maskz_loadu_ps(kMask, bias) : _mm_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm_mask_storeu_ps(y + r * ldy, kMask, _mm_add_ps(b, sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3])));
  }
}

template <int MR, int NR>
void row_tile_edge(int mr, const uint16_t* xb, int64_t k, const uint16_t* w, float* y, int64_t ldy,
                   const float* bias) {
  if constexpr (MR > 1) {
    if (mr < MR) return row_tile_edge<MR - 1, NR>(mr, xb, k, w, y, ldy, bias);
  }
  row_tile<MR, NR>(xb, k, w, y, ldy, bias);
}

void row_tile_any(int mr, int nr, const uint16_t* xb, int64_t k, const uint16_t* w, float* y, int64_t ldy,
                  const float* bias) {
  switch (nr) {
    case 4: return row_tile_edge<kRowTileX, 4>(mr, xb, k, w, y, ldy, bias);
    case 3: return row_tile_edge<kRowTileX, 3>(mr, xb, k, w, y, ldy, bias);
    case 2: return row_tile_edge<kRowTileX, 2>(mr, xb, k, w, y, ldy, bias);
    default: return row_tile_edge<kRowTileX, 1>(mr, xb, k, w, y, ldy, bias);
  }
}

void matmul_bf16dot_rows(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                         float* y) {
  uint16_t* xb = activation_scratch(m, k);
  const auto* wb = reinterpret_cast<const uint16_t*>(w);
  const detail::Blocking bl = detail::matmul_blocking(m, n, k, kRowTileX, kRowTileW, 0, 1);
  const auto round_rows = [&] { round_rows_to_bf16(x, m, k, xb); };
  detail::matmul_parallel(m, n, bl, round_rows, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    // Four weight rows stay in L1 while every activation row of the block passes them. The
    // rows kPrefetchTiles tiles ahead are fetched meanwhile: they are contiguous, but a
    // hardware prefetcher restarts at every 4 KiB page and stays behind the loads at decode.
    for (int64_t j = j0; j < j1; j += kRowTileW) {
      const int64_t ahead = j + kPrefetchTiles * kRowTileW;
      if (ahead < j1) {
        const char* p = reinterpret_cast<const char*>(wb + ahead * k);
        const int64_t bytes = std::min<int64_t>(kRowTileW, j1 - ahead) * k * 2;
        for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
      }
      const int nr = static_cast<int>(std::min<int64_t>(kRowTileW, j1 - j));
      const float* bb = bias != nullptr ? bias + j : nullptr;
      for (int64_t i = i0; i < i1; i += kRowTileX) {
        const int mr = static_cast<int>(std::min<int64_t>(kRowTileX, i1 - i));
        row_tile_any(mr, nr, xb + i * k, k, wb + j * k, y + i * n + j, n, bb);
      }
    }
  });
}

constexpr MatmulKernel kKernels[] = {
    {"bf16p8.avx512bf16.dot", WeightFormat::kBF16Panel8, Isa::kAvx512Bf16, matmul_bf16dot},
    {"bf16.avx512bf16.dot", WeightFormat::kBF16, Isa::kAvx512Bf16, matmul_bf16dot_rows},
};

}  // namespace
}  // namespace kiln::cpu::avx512bf16

KILN_ISA_TARGET_END()

namespace kiln::cpu::detail {
std::span<const MatmulKernel> matmul_kernels_avx512bf16() { return avx512bf16::kKernels; }
}  // namespace kiln::cpu::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
