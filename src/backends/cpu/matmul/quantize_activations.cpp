#include "backends/cpu/matmul/quantize_activations.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::cpu {
namespace {

size_t align64(size_t v) { return (v + 63) / 64 * 64; }

// Scale and its reciprocal, computed the same way on every path so results are bit-identical.
void block_scale(float amax, float* d, float* inv) {
  *d = amax / 127.0f;
  *inv = *d > 0.0f ? 1.0f / *d : 0.0f;
}

void quantize_row_scalar(const float* x, int64_t cols, int8_t* q, float* d, int32_t* sum,
                         int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kQ8Block;
    const int64_t end = std::min<int64_t>(cols, begin + kQ8Block);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
    float inv = 0.0f;
    block_scale(amax, &d[b], &inv);
    int32_t s = 0;
    for (int64_t i = begin; i < begin + kQ8Block; ++i) {
      const float v = i < end ? std::nearbyint(x[i] * inv) : 0.0f;
      q[i] = static_cast<int8_t>(v);
      s += static_cast<int32_t>(v);
    }
    sum[b] = s;
  }
}

#if defined(__x86_64__)
// x: [cols] -> q: [blocks * 32]. Full blocks use AVX2; a partial last block goes scalar.
__attribute__((target("avx2,fma"))) void quantize_row_avx2(const float* x, int64_t cols, int8_t* q,
                                                           float* d, int32_t* sum, int64_t blocks) {
  const int64_t full = cols / kQ8Block;
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256i ones16 = _mm256_set1_epi16(1);
  // packs_epi32 / packs_epi16 interleave 128-bit lanes; this puts the 8 dwords back in order.
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < full; ++b) {
    const float* xb = x + b * kQ8Block;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[j]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float inv = 0.0f;
    block_scale(_mm_cvtss_f32(m4), &d[b], &inv);
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i i32[4];
    for (int j = 0; j < 4; ++j) i32[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], vinv));  // nearest even
    const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]);
    const __m256i i16b = _mm256_packs_epi32(i32[2], i32[3]);
    __m256i i8 = _mm256_packs_epi16(i16a, i16b);
    i8 = _mm256_permutevar8x32_epi32(i8, unshuffle);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ8Block), i8);
    __m256i s = _mm256_madd_epi16(_mm256_add_epi16(i16a, i16b), ones16);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    sum[b] = _mm_cvtsi128_si32(s4);
  }
  if (full < blocks) {
    quantize_row_scalar(x + full * kQ8Block, cols - full * kQ8Block, q + full * kQ8Block, d + full,
                        sum + full, blocks - full);
  }
}
#endif

}  // namespace

size_t q8_rows_bytes(int64_t rows, int64_t cols) {
  const auto r = static_cast<size_t>(rows);
  const auto blocks = static_cast<size_t>((cols + kQ8Block - 1) / kQ8Block);
  return align64(r * blocks * kQ8Block) + align64(r * blocks * sizeof(float)) +
         align64(r * blocks * sizeof(int32_t));
}

Q8Rows q8_rows_view(void* storage, int64_t rows, int64_t cols) {
  Q8Rows v;
  v.rows = rows;
  v.cols = cols;
  v.blocks = (cols + kQ8Block - 1) / kQ8Block;
  const auto r = static_cast<size_t>(rows);
  const auto blocks = static_cast<size_t>(v.blocks);
  auto* p = static_cast<std::byte*>(storage);
  v.q = reinterpret_cast<int8_t*>(p);
  p += align64(r * blocks * kQ8Block);
  v.d = reinterpret_cast<float*>(p);
  p += align64(r * blocks * sizeof(float));
  v.sum = reinterpret_cast<int32_t*>(p);
  return v;
}

void q8_quantize_row(const float* x_row, int64_t r, const Q8Rows& out, Isa isa) {
  int8_t* q = out.q + r * out.q_stride();
  float* d = out.d + r * out.blocks;
  int32_t* sum = out.sum + r * out.blocks;
#if defined(__x86_64__)
  if (isa >= Isa::kAvx2) {
    quantize_row_avx2(x_row, out.cols, q, d, sum, out.blocks);
    return;
  }
#endif
  quantize_row_scalar(x_row, out.cols, q, d, sum, out.blocks);
}

}  // namespace kiln::cpu
