// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "backends/cpu/layers/attention.h"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd_exp.h"
#include "base/half.h"
#include "base/status.h"

namespace kiln::cpu {
namespace {

// One unit of work: query row `row` of the step at position `pos` in its sequence, for the
// query heads [head_begin, head_end), which all read the same kv head. It sees the sequence's
// keys at positions [lo, pos], found through the block table.
struct HeadsTask {
  int64_t row;
  int64_t pos;
  int64_t lo;
  int64_t head_begin;
  int64_t head_end;
  int64_t kv_head;
  const int32_t* block_table;
};

// kv_row = num_kv_heads * head_dim elements between consecutive tokens of a block; T is the
// cache's element: float, uint16_t holding bf16, or uint8_t holding e4m3.
template <typename T>
struct Geometry {
  const T* cache_k;
  const T* cache_v;
  int64_t num_blocks;
  int64_t block_size;
  int64_t kv_row;
  int64_t head_dim;
  float scale;
};

// A run of consecutive positions [first, first + count) that share a cache block; k and v point
// at the kv head's slice of the run's first row.
template <typename T>
struct Run {
  int64_t first;
  int64_t count;
  const T* k;
  const T* v;
};

// The runs covering positions [lo, pos] of a sequence, in order, into `runs`.
template <typename T>
void collect_runs(const Geometry<T>& g, const int32_t* table, int64_t lo, int64_t pos, int64_t kv_offset,
                  std::vector<Run<T>>& runs) {
  runs.clear();
  for (int64_t start = lo; start <= pos;) {
    const int64_t b = start / g.block_size;
    const int64_t end = std::min(pos + 1, (b + 1) * g.block_size);
    const int64_t block = table[b];
    KILN_CHECK(block >= 0 && block < g.num_blocks);
    const int64_t row = (block * g.block_size + start % g.block_size) * g.kv_row + kv_offset;
    runs.push_back({start, end - start, g.cache_k + row, g.cache_v + row});
    start = end;
  }
}

// Asks for a run's rows of one kv head (head_dim elements each, kv_row apart) to be brought into
// the cache. Blocks lie scattered over the pool, so the hardware prefetchers, which follow a
// stream within a page, start afresh at every block; a software prefetch one run ahead keeps
// the loads from waiting on memory.
template <typename T>
void prefetch_rows(const T* rows, int64_t count, int64_t kv_row, int64_t head_dim) {
  const auto bytes = static_cast<int64_t>(head_dim * sizeof(T));
  for (int64_t j = 0; j < count; ++j) {
    const char* p = reinterpret_cast<const char*>(rows + j * kv_row);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
  }
}

// A cached element as a float: fp32 as it is, bf16 and e4m3 widened (exact).
inline float kv_float(float x) { return x; }
inline float kv_float(uint16_t x) { return bf16_to_float(x); }
inline float kv_float(uint8_t x) { return e4m3_to_float(x); }

// The loops over a task's query heads, one head at a time: scores for `heads` heads whose
// queries follow each other head_dim floats apart, into rows of s n floats apart; and their
// weighted sums of values into acc: [heads, head_dim]. Ops whose kernels can share a widened key
// or value row among heads (Avx512Ops) replace these.
template <typename Ops>
struct OneHeadAtATime {
  template <typename T>
  static void scores_heads(const float* q, int64_t heads, const T* k, int64_t kv_row, int64_t count,
                           int64_t head_dim, float scale, float* s, int64_t n) {
    for (int64_t r = 0; r < heads; ++r) Ops::scores(q + r * head_dim, k, kv_row, count, head_dim, scale, s + r * n);
  }

  template <typename T>
  static void accumulate_heads(const float* p, int64_t n, int64_t heads, const T* v, int64_t kv_row,
                               int64_t count, int64_t head_dim, float* acc) {
    for (int64_t r = 0; r < heads; ++r) Ops::accumulate(p + r * n, v, kv_row, count, head_dim, acc + r * head_dim);
  }
};

// ---- Portable inner loops; `omp simd` lets the compiler vectorise the reductions. ----
struct ScalarOps : OneHeadAtATime<ScalarOps> {
  // s[j] = scale * q . k_j for `count` keys kv_row elements apart; q, k_j: [head_dim].
  template <typename T>
  static void scores(const float* q, const T* k, int64_t kv_row, int64_t count,
                     int64_t head_dim, float scale, float* s) {
    for (int64_t j = 0; j < count; ++j) {
      const T* kj = k + j * kv_row;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * kv_float(kj[d]);
      s[j] = scale * dot;
    }
  }

  // s[j] = exp(s[j] - max(s)), returns the sum; s: [n], n >= 1.
  static double softmax_numerators(float* s, int64_t n) {
    float m = s[0];
    for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += static_cast<double>(s[j]);
    }
    return sum;
  }

  // acc[d] += sum_j p[j] * v_j[d]; acc: [head_dim].
  template <typename T>
  static void accumulate(const float* p, const T* v, int64_t kv_row, int64_t count,
                         int64_t head_dim, float* acc) {
    for (int64_t j = 0; j < count; ++j) {
      const T* vj = v + j * kv_row;
      const float pj = p[j];
#pragma omp simd
      for (int64_t d = 0; d < head_dim; ++d) acc[d] += pj * kv_float(vj[d]);
    }
  }
};

// ---- AVX2 + FMA inner loops, chosen at run time. ----
#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))

// e4m3 bytes (in 16-bit lanes) as the fp16 values 2^-8 times theirs: the exponent and mantissa
// bits move up by 7 (fp16's exponent bias is 8 more than e4m3's), the sign to bit 15. Exact for
// subnormals too, which fp16's conversion to float widens without denormal inputs to the FPU.
KILN_AVX2 inline __m128i e4m3_as_fp16(__m128i w) {
  const __m128i magnitude = _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7f)), 7);
  return _mm_or_si128(magnitude, _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8));
}
KILN_AVX2 inline __m256i e4m3_as_fp16(__m256i w) {
  const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7);
  return _mm256_or_si256(magnitude, _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8));
}
// 480 = 0x7f's exponent and mantissa read as a number; e4m3 has no such value: it is the NaN code.
constexpr float kE4m3NanAsValue = 480.0f;

// Eight cached elements as floats.
KILN_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
KILN_AVX2 inline __m256 load8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
KILN_AVX2 inline __m256 load8(const uint8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m256 f = _mm256_mul_ps(_mm256_cvtph_ps(e4m3_as_fp16(_mm_cvtepu8_epi16(bytes))), _mm256_set1_ps(256.0f));
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), f);
  const __m256 nan = _mm256_cmp_ps(magnitude, _mm256_set1_ps(kE4m3NanAsValue), _CMP_EQ_OQ);
  return _mm256_blendv_ps(f, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan);
}

KILN_AVX2 inline double hsum(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// Sums the lanes of each of a, b, c, d: returns {sum(a), sum(b), sum(c), sum(d)}. One key's
// dot product always goes through this same tree, alone or with three others, so its value
// does not depend on how keys are grouped.
KILN_AVX2 inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

struct Avx2Ops : OneHeadAtATime<Avx2Ops> {
  // Four keys at a time: four independent FMA chains hide the FMA latency, and one reduction
  // tree serves all four.
  template <typename T>
  KILN_AVX2 static void scores(const float* q, const T* k, int64_t kv_row, int64_t count,
                               int64_t head_dim, float scale, float* s) {
    const int64_t vec_end = head_dim / 8 * 8;
    int64_t j = 0;
    for (; j + 4 <= count; j += 4) {
      const T* k0 = k + j * kv_row;
      const T* k1 = k0 + kv_row;
      const T* k2 = k1 + kv_row;
      const T* k3 = k2 + kv_row;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
      for (int64_t d = 0; d < vec_end; d += 8) {
        const __m256 qd = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qd, load8(k0 + d), a0);
        a1 = _mm256_fmadd_ps(qd, load8(k1 + d), a1);
        a2 = _mm256_fmadd_ps(qd, load8(k2 + d), a2);
        a3 = _mm256_fmadd_ps(qd, load8(k3 + d), a3);
      }
      alignas(16) float dots[4];
      _mm_store_ps(dots, hsum4(a0, a1, a2, a3));
      const T* rows[4] = {k0, k1, k2, k3};
      for (int r = 0; r < 4; ++r) {
        for (int64_t d = vec_end; d < head_dim; ++d) dots[r] += q[d] * kv_float(rows[r][d]);
        s[j + r] = scale * dots[r];
      }
    }
    for (; j < count; ++j) {
      const T* kj = k + j * kv_row;
      __m256 a0 = _mm256_setzero_ps();
      for (int64_t d = 0; d < vec_end; d += 8) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(kj + d), a0);
      }
      float dot = _mm_cvtss_f32(hsum4(a0, a0, a0, a0));
      for (int64_t d = vec_end; d < head_dim; ++d) dot += q[d] * kv_float(kj[d]);
      s[j] = scale * dot;
    }
  }

  KILN_AVX2 static double softmax_numerators(float* s, int64_t n) {
    const int64_t vec_end = n / 8 * 8;
    __m256 mv = _mm256_set1_ps(s[0]);
    for (int64_t j = 0; j < vec_end; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mv);
    float m = *std::max_element(lanes, lanes + 8);
    for (int64_t j = vec_end; j < n; ++j) m = std::max(m, s[j]);
    const __m256 max_v = _mm256_set1_ps(m);
    __m256d sum = _mm256_setzero_pd();
    for (int64_t j = 0; j < vec_end; j += 8) sum = exp_store(s + j, max_v, sum);
    if (vec_end < n) {
      // The tail goes through the same polynomial, padded with lanes that evaluate to 0.
      alignas(32) float tail[8];
      std::fill(tail, tail + 8, -1.0e30f);
      std::copy(s + vec_end, s + n, tail);
      sum = exp_store(tail, max_v, sum);
      std::copy(tail, tail + (n - vec_end), s + vec_end);
    }
    return hsum(sum);
  }

  // p[0..8) = exp(p - max_v); returns sum + the eight values, summed in double.
  KILN_AVX2 static __m256d exp_store(float* p, __m256 max_v, __m256d sum) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(p), max_v));
    _mm256_storeu_ps(p, e);
    sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    return _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }

  // acc is loaded and stored once per four keys; the FMAs still run in key order, so the sum
  // is the same as one key at a time.
  template <typename T>
  KILN_AVX2 static void accumulate(const float* p, const T* v, int64_t kv_row, int64_t count,
                                   int64_t head_dim, float* acc) {
    const int64_t vec_end = head_dim / 8 * 8;
    int64_t j = 0;
    for (; j + 4 <= count; j += 4) {
      const T* v0 = v + j * kv_row;
      const T* v1 = v0 + kv_row;
      const T* v2 = v1 + kv_row;
      const T* v3 = v2 + kv_row;
      const __m256 p0 = _mm256_set1_ps(p[j]), p1 = _mm256_set1_ps(p[j + 1]);
      const __m256 p2 = _mm256_set1_ps(p[j + 2]), p3 = _mm256_set1_ps(p[j + 3]);
      for (int64_t d = 0; d < vec_end; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        a = _mm256_fmadd_ps(p0, load8(v0 + d), a);
        a = _mm256_fmadd_ps(p1, load8(v1 + d), a);
        a = _mm256_fmadd_ps(p2, load8(v2 + d), a);
        a = _mm256_fmadd_ps(p3, load8(v3 + d), a);
        _mm256_storeu_ps(acc + d, a);
      }
      for (int64_t d = vec_end; d < head_dim; ++d) {
        for (int r = 0; r < 4; ++r) acc[d] += p[j + r] * kv_float(v[(j + r) * kv_row + d]);
      }
    }
    for (; j < count; ++j) {
      const T* vj = v + j * kv_row;
      const __m256 pj = _mm256_set1_ps(p[j]);
      for (int64_t d = 0; d < vec_end; d += 8) {
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pj, load8(vj + d), _mm256_loadu_ps(acc + d)));
      }
      for (int64_t d = vec_end; d < head_dim; ++d) acc[d] += p[j] * kv_float(vj[d]);
    }
  }
};

// ---- AVX-512 inner loops for the head sizes fits() accepts; attention() sends others to Avx2Ops. ----
#define KILN_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma,f16c")))

// Sixteen cached elements as floats.
KILN_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
KILN_AVX512 inline __m512 load16(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
KILN_AVX512 inline __m512 load16(const uint8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(e4m3_as_fp16(_mm256_cvtepu8_epi16(bytes))), _mm512_set1_ps(256.0f));
  const __mmask16 nan = _mm512_cmp_ps_mask(_mm512_abs_ps(f), _mm512_set1_ps(kE4m3NanAsValue), _CMP_EQ_OQ);
  return _mm512_mask_mov_ps(f, nan, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
}

// float_to_e4m3 (base/half.h) of 16 floats at once, the same steps in lanes.
KILN_AVX512 inline __m128i e4m3_from16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  // Normal: 3 mantissa bits rounded to nearest even, the exponent rebiased, capped at 0x7e.
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(abs, 20), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(abs, _mm512_add_epi32(_mm512_set1_epi32(0x7ffff), odd));
  const __m512i exp = _mm512_sub_epi32(_mm512_srli_epi32(r, 23), _mm512_set1_epi32(127 - 7));
  const __m512i mant = _mm512_and_si512(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(7));
  __m512i code = _mm512_min_epu32(_mm512_or_si512(_mm512_slli_epi32(exp, 3), mant), _mm512_set1_epi32(0x7e));
  // Below 2^-6: steps of 2^-9, counted by the float adder's rounding at 2^14.
  const __m512 offset = _mm512_set1_ps(16384.0f);
  const __m512i steps = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(abs), offset)),
                                         _mm512_castps_si512(offset));
  code = _mm512_mask_mov_epi32(code, _mm512_cmplt_epu32_mask(abs, _mm512_set1_epi32(0x3c800000)), steps);
  code = _mm512_mask_mov_epi32(code, _mm512_cmpge_epu32_mask(abs, _mm512_set1_epi32(0x43e00000)),
                               _mm512_set1_epi32(0x7e));
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000)),
                               _mm512_set1_epi32(0x7f));
  return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

// out[0..n) = float_to_e4m3(x[0..n)).
KILN_AVX512 void store_e4m3_avx512(const float* x, int64_t n, uint8_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), e4m3_from16(_mm512_loadu_ps(x + i)));
  }
  for (; i < n; ++i) out[i] = float_to_e4m3(x[i]);
}

struct Avx512Ops {
  static bool fits(int64_t head_dim) { return head_dim % 16 == 0 && head_dim <= 128; }

  // q stays in registers; four keys at a time. Each key's 16 lanes fold to 8 and then go through
  // hsum4's tree, alone or with three others, so a key's score does not depend on the grouping.
  template <typename T>
  KILN_AVX512 static void scores(const float* q, const T* k, int64_t kv_row, int64_t count,
                                 int64_t head_dim, float scale, float* s) {
    const int64_t nv = head_dim / 16;
    __m512 qv[8];
    for (int64_t v = 0; v < nv; ++v) qv[v] = _mm512_loadu_ps(q + 16 * v);
    int64_t j = 0;
    for (; j + 4 <= count; j += 4) {
      const T* k0 = k + j * kv_row;
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
      __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
      for (int64_t v = 0; v < nv; ++v) {
        a0 = _mm512_fmadd_ps(qv[v], load16(k0 + 16 * v), a0);
        a1 = _mm512_fmadd_ps(qv[v], load16(k0 + kv_row + 16 * v), a1);
        a2 = _mm512_fmadd_ps(qv[v], load16(k0 + 2 * kv_row + 16 * v), a2);
        a3 = _mm512_fmadd_ps(qv[v], load16(k0 + 3 * kv_row + 16 * v), a3);
      }
      const __m128 dots = hsum4(fold(a0), fold(a1), fold(a2), fold(a3));
      _mm_storeu_ps(s + j, _mm_mul_ps(dots, _mm_set1_ps(scale)));
    }
    for (; j < count; ++j) {
      const T* kj = k + j * kv_row;
      __m512 a0 = _mm512_setzero_ps();
      for (int64_t v = 0; v < nv; ++v) a0 = _mm512_fmadd_ps(qv[v], load16(kj + 16 * v), a0);
      const __m256 f = fold(a0);
      s[j] = _mm_cvtss_f32(_mm_mul_ps(hsum4(f, f, f, f), _mm_set1_ps(scale)));
    }
  }

  static double softmax_numerators(float* s, int64_t n) { return Avx2Ops::softmax_numerators(s, n); }

  // acc stays in registers over all the keys; each lane's FMAs run in key order, as Avx2Ops's do,
  // so the sums are the same bits.
  template <typename T>
  KILN_AVX512 static void accumulate(const float* p, const T* v, int64_t kv_row, int64_t count,
                                     int64_t head_dim, float* acc) {
    const int64_t nv = head_dim / 16;
    __m512 a[8];
    for (int64_t c = 0; c < nv; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
    for (int64_t j = 0; j < count; ++j) {
      const T* vj = v + j * kv_row;
      const __m512 pj = _mm512_set1_ps(p[j]);
      for (int64_t c = 0; c < nv; ++c) a[c] = _mm512_fmadd_ps(pj, load16(vj + 16 * c), a[c]);
    }
    for (int64_t c = 0; c < nv; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
  }

  // Lanes i and i + 8 added: 16 lanes to 8.
  KILN_AVX512 static __m256 fold(__m512 x) {
    return _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
  }

  // The heads of a task read the same keys and values. For the common head sizes (64 and 128)
  // the kernels below take up to four heads at once, so that each cached row is widened once for
  // all of them and their FMA chains overlap (one head's four chains leave the FMA units waiting
  // on latency). Every head's arithmetic is the one of scores() and accumulate() above, in the
  // same order, so the bits do not depend on how heads are grouped; other sizes go one head at a
  // time.
  template <typename T>
  static void scores_heads(const float* q, int64_t heads, const T* k, int64_t kv_row, int64_t count,
                           int64_t head_dim, float scale, float* s, int64_t n) {
    for (int64_t r = 0; r < heads;) {
      const int64_t h = std::min<int64_t>(4, heads - r);
      const float* qr = q + r * head_dim;
      float* sr = s + r * n;
      if (head_dim == 64) {
        scores_group<4>(static_cast<int>(h), qr, k, kv_row, count, scale, sr, n);
      } else if (head_dim == 128) {
        scores_group<8>(static_cast<int>(h), qr, k, kv_row, count, scale, sr, n);
      } else {
        for (int64_t i = 0; i < h; ++i) scores(qr + i * head_dim, k, kv_row, count, head_dim, scale, sr + i * n);
      }
      r += h;
    }
  }

  template <typename T>
  static void accumulate_heads(const float* p, int64_t n, int64_t heads, const T* v, int64_t kv_row,
                               int64_t count, int64_t head_dim, float* acc) {
    // At most 16 accumulators: four heads of 64, two of 128.
    const int64_t most = head_dim == 64 ? 4 : head_dim == 128 ? 2 : 1;
    for (int64_t r = 0; r < heads;) {
      const int64_t h = std::min(most, heads - r);
      const float* pr = p + r * n;
      float* ar = acc + r * head_dim;
      if (head_dim == 64) {
        accumulate_group<4>(static_cast<int>(h), pr, n, v, kv_row, count, ar);
      } else if (head_dim == 128) {
        accumulate_group<8>(static_cast<int>(h), pr, n, v, kv_row, count, ar);
      } else {
        accumulate(pr, v, kv_row, count, head_dim, ar);
      }
      r += h;
    }
  }

  template <int NV, typename T>
  static void scores_group(int heads, const float* q, const T* k, int64_t kv_row, int64_t count,
                           float scale, float* s, int64_t n) {
    switch (heads) {
      case 1: return scores_tile<NV, 1>(q, k, kv_row, count, scale, s, n);
      case 2: return scores_tile<NV, 2>(q, k, kv_row, count, scale, s, n);
      case 3: return scores_tile<NV, 3>(q, k, kv_row, count, scale, s, n);
      default: return scores_tile<NV, 4>(q, k, kv_row, count, scale, s, n);
    }
  }

  template <int NV, typename T>
  static void accumulate_group(int heads, const float* p, int64_t n, const T* v, int64_t kv_row,
                               int64_t count, float* acc) {
    switch (heads) {
      case 1: return accumulate_tile<NV, 1>(p, n, v, kv_row, count, acc);
      case 2: return accumulate_tile<NV, 2>(p, n, v, kv_row, count, acc);
      case 3: return accumulate_tile<NV, 3>(p, n, v, kv_row, count, acc);
      default: return accumulate_tile<NV, 4>(p, n, v, kv_row, count, acc);
    }
  }

  // H heads of NV * 16 elements against four keys at a time: 4H accumulators, each key row
  // widened once per 16 elements; the queries come from L1.
  template <int NV, int H, typename T>
  KILN_AVX512 static void scores_tile(const float* q, const T* k, int64_t kv_row, int64_t count,
                                      float scale, float* s, int64_t n) {
    constexpr int64_t hd = NV * 16;
    const __m128 scale4 = _mm_set1_ps(scale);
    int64_t j = 0;
    for (; j + 4 <= count; j += 4) {
      const T* k0 = k + j * kv_row;
      __m512 a[H][4];
#pragma GCC unroll 16
      for (int h = 0; h < H; ++h) {
        for (int r = 0; r < 4; ++r) a[h][r] = _mm512_setzero_ps();
      }
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const __m512 kv0 = load16(k0 + 16 * v);
        const __m512 kv1 = load16(k0 + kv_row + 16 * v);
        const __m512 kv2 = load16(k0 + 2 * kv_row + 16 * v);
        const __m512 kv3 = load16(k0 + 3 * kv_row + 16 * v);
#pragma GCC unroll 4
        for (int h = 0; h < H; ++h) {
          const __m512 qv = _mm512_loadu_ps(q + h * hd + 16 * v);
          a[h][0] = _mm512_fmadd_ps(qv, kv0, a[h][0]);
          a[h][1] = _mm512_fmadd_ps(qv, kv1, a[h][1]);
          a[h][2] = _mm512_fmadd_ps(qv, kv2, a[h][2]);
          a[h][3] = _mm512_fmadd_ps(qv, kv3, a[h][3]);
        }
      }
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        const __m128 dots = hsum4(fold(a[h][0]), fold(a[h][1]), fold(a[h][2]), fold(a[h][3]));
        _mm_storeu_ps(s + h * n + j, _mm_mul_ps(dots, scale4));
      }
    }
    for (; j < count; ++j) {
      const T* kj = k + j * kv_row;
      __m512 a[H];
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) a[h] = _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const __m512 kv = load16(kj + 16 * v);
#pragma GCC unroll 4
        for (int h = 0; h < H; ++h) a[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * hd + 16 * v), kv, a[h]);
      }
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        const __m256 f = fold(a[h]);
        s[h * n + j] = _mm_cvtss_f32(_mm_mul_ps(hsum4(f, f, f, f), scale4));
      }
    }
  }

  // H heads' sums of NV * 16 elements in H * NV accumulators (at most 16) over all the keys;
  // each value row widened once.
  template <int NV, int H, typename T>
  KILN_AVX512 static void accumulate_tile(const float* p, int64_t n, const T* v, int64_t kv_row,
                                          int64_t count, float* acc) {
    constexpr int64_t hd = NV * 16;
    __m512 a[H][NV];
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      for (int c = 0; c < NV; ++c) a[h][c] = _mm512_loadu_ps(acc + h * hd + 16 * c);
    }
    for (int64_t j = 0; j < count; ++j) {
      const T* vj = v + j * kv_row;
      __m512 vv[NV];
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) vv[c] = load16(vj + 16 * c);
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        const __m512 ph = _mm512_set1_ps(p[h * n + j]);
#pragma GCC unroll 8
        for (int c = 0; c < NV; ++c) a[h][c] = _mm512_fmadd_ps(ph, vv[c], a[h][c]);
      }
    }
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      for (int c = 0; c < NV; ++c) _mm512_storeu_ps(acc + h * hd + 16 * c, a[h][c]);
    }
  }
};

#undef KILN_AVX512
#undef KILN_AVX2

// Scores, softmax and weighted sum of values for one task. The heads of a task share their
// keys and values, so each run of cached rows is read from memory once and reused from L1 for
// every head; the per-head arithmetic is the same whichever heads share a task.
// scores: [heads, n], acc: [heads, head_dim] and sums: [heads] are the calling thread's scratch.
template <typename Ops, typename T>
void attend_heads(const Geometry<T>& g, const AttentionShape& shape, const float* q, int64_t q_stride,
                  const HeadsTask& t, std::vector<float>& scores, std::vector<float>& acc,
                  std::vector<double>& sums, std::vector<Run<T>>& runs, float* out) {
  const int64_t hd = g.head_dim;
  const int64_t heads = t.head_end - t.head_begin;
  const int64_t n = t.pos - t.lo + 1;
  if (static_cast<int64_t>(scores.size()) < heads * n) {
    scores.resize(static_cast<size_t>(heads * n));
  }
  if (static_cast<int64_t>(acc.size()) < heads * hd) acc.resize(static_cast<size_t>(heads * hd));
  const float* q_row = q + t.row * q_stride + t.head_begin * hd;
  collect_runs(g, t.block_table, t.lo, t.pos, t.kv_head * hd, runs);
  // s[r]: [n], s[r][j] = scale * q_r . K[lo + j] (+ slope_r * (lo + j - pos)). While a run's keys
  // are scored, the next run's keys and this run's values are fetched.
  prefetch_rows(runs[0].k, runs[0].count, g.kv_row, hd);
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run<T>& run = runs[i];
    if (i + 1 < runs.size()) prefetch_rows(runs[i + 1].k, runs[i + 1].count, g.kv_row, hd);
    prefetch_rows(run.v, run.count, g.kv_row, hd);
    Ops::scores_heads(q_row, heads, run.k, g.kv_row, run.count, hd, g.scale, scores.data() + (run.first - t.lo), n);
  }
  std::fill(acc.begin(), acc.begin() + heads * hd, 0.0f);
  sums.resize(static_cast<size_t>(heads));
  for (int64_t r = 0; r < heads; ++r) {
    float* s = scores.data() + r * n;
    if (shape.alibi_slopes != nullptr) {
      const float slope = shape.alibi_slopes[t.head_begin + r];
      for (int64_t j = 0; j < n; ++j) s[j] += slope * static_cast<float>(t.lo + j - t.pos);
    }
    sums[static_cast<size_t>(r)] = Ops::softmax_numerators(s, n);
  }
  for (const Run<T>& run : runs) {
    Ops::accumulate_heads(scores.data() + (run.first - t.lo), n, heads, run.v, g.kv_row, run.count, hd, acc.data());
  }
  for (int64_t r = 0; r < heads; ++r) {
    const auto inv_sum = static_cast<float>(1.0 / sums[static_cast<size_t>(r)]);
    float* o = out + t.row * shape.num_heads * hd + (t.head_begin + r) * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[static_cast<size_t>(r * hd + d)] * inv_sum;
  }
}

template <typename Ops, typename T>
void attend_all(const float* q, int64_t q_stride, const AttentionBatch& batch,
                const AttentionShape& shape, const Geometry<T>& g, float* out) {
  const int32_t* qs = batch.query_start;
  const int64_t row_begin = qs[0];
  const int64_t rows = qs[batch.num_seqs] - row_begin;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  // Keep a kv head's query heads together (one read of its keys and values) unless that leaves
  // threads idle, as a single decode row would; then split the groups.
  const int64_t units = rows * shape.num_kv_heads;
  const int64_t threads = omp_get_max_threads();
  const int64_t splits = std::min(group, std::max<int64_t>(1, (threads + units - 1) / units));
  const int64_t heads_per_task = (group + splits - 1) / splits;
  const int64_t tasks_per_group = (group + heads_per_task - 1) / heads_per_task;
  const int64_t tasks = units * tasks_per_group;
  parallel_region(tasks > 1, [&] {
    std::vector<float> scores;
    std::vector<float> acc;
    std::vector<double> sums;
    std::vector<Run<T>> runs;
    // Rows differ in length (causal prefill), so hand out work dynamically.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      HeadsTask t;
      t.row = row_begin + task / (shape.num_kv_heads * tasks_per_group);
      t.kv_head = task / tasks_per_group % shape.num_kv_heads;
      t.head_begin = t.kv_head * group + task % tasks_per_group * heads_per_task;
      t.head_end = std::min(t.head_begin + heads_per_task, (t.kv_head + 1) * group);
      // The sequence owning the row: the last s with query_start[s] <= row.
      const int64_t s =
          std::upper_bound(qs, qs + batch.num_seqs + 1, static_cast<int32_t>(t.row)) - qs - 1;
      t.block_table = batch.block_tables[s];
      t.pos = batch.context_len[s] + (t.row - qs[s]);
      t.lo = shape.sliding_window > 0 ? std::max<int64_t>(0, t.pos - shape.sliding_window + 1) : 0;
      attend_heads<Ops>(g, shape, q, q_stride, t, scores, acc, sums, runs, out);
    }
  });
}

// attention() after the store, for a cache of T elements.
template <typename T>
void attend_cached(const float* q, int64_t q_stride, const AttentionBatch& batch, const AttentionShape& shape,
                   const KvCacheLayer& cache, float* out) {
  Geometry<T> g;
  g.cache_k = static_cast<const T*>(cache.k);
  g.cache_v = static_cast<const T*>(cache.v);
  g.num_blocks = cache.num_blocks;
  g.block_size = cache.block_size;
  g.kv_row = shape.num_kv_heads * shape.head_dim;
  g.head_dim = shape.head_dim;
  g.scale = shape.scale;
  if (isa_active() >= Isa::kAvx512 && Avx512Ops::fits(shape.head_dim)) {
    attend_all<Avx512Ops>(q, q_stride, batch, shape, g, out);
  } else if (isa_active() >= Isa::kAvx2) {
    attend_all<Avx2Ops>(q, q_stride, batch, shape, g, out);
  } else {
    attend_all<ScalarOps>(q, q_stride, batch, shape, g, out);
  }
}

// Steps with fewer rows store them on the calling thread (a parallel region costs more).
constexpr int64_t kParallelStoreRows = 16;

}  // namespace

void kv_cache_store(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                    const AttentionBatch& batch, int64_t num_kv_heads, int64_t head_dim,
                    KvCacheLayer cache) {
  const int64_t kv_row = num_kv_heads * head_dim;
  const size_t row_bytes = static_cast<size_t>(kv_row) * sizeof(float);
  auto* k16 = static_cast<uint16_t*>(cache.k);
  auto* v16 = static_cast<uint16_t*>(cache.v);
  auto* k8 = static_cast<uint8_t*>(cache.k);
  auto* v8 = static_cast<uint8_t*>(cache.v);
  const bool avx512 = isa_active() >= Isa::kAvx512;
  const int32_t* qs = batch.query_start;
  const int64_t row_begin = qs[0];
  const int64_t rows = qs[batch.num_seqs] - row_begin;
  // The slots are scattered over the pool and mostly out of cache: each row costs cache and TLB
  // misses rather than bandwidth, so the rows are shared among the threads.
  parallel_for(row_begin, row_begin + rows, rows >= kParallelStoreRows, [&](int64_t i) {
    const int64_t s = std::upper_bound(qs, qs + batch.num_seqs + 1, static_cast<int32_t>(i)) - qs - 1;
    const int64_t pos = batch.context_len[s] + (i - qs[s]);
    const int64_t block = batch.block_tables[s][pos / cache.block_size];
    KILN_CHECK(block >= 0 && block < cache.num_blocks);
    const int64_t slot = block * cache.block_size + pos % cache.block_size;
    const float* ki = k + i * k_stride;
    const float* vi = v + i * v_stride;
    if (cache.element == KvCacheDtype::kBF16) {
      uint16_t* kd = k16 + slot * kv_row;
      uint16_t* vd = v16 + slot * kv_row;
      for (int64_t d = 0; d < kv_row; ++d) {
        kd[d] = float_to_bf16(ki[d]);
        vd[d] = float_to_bf16(vi[d]);
      }
    } else if (cache.element == KvCacheDtype::kFP8) {
      uint8_t* kd = k8 + slot * kv_row;
      uint8_t* vd = v8 + slot * kv_row;
      if (avx512) {
        store_e4m3_avx512(ki, kv_row, kd);
        store_e4m3_avx512(vi, kv_row, vd);
      } else {
        for (int64_t d = 0; d < kv_row; ++d) {
          kd[d] = float_to_e4m3(ki[d]);
          vd[d] = float_to_e4m3(vi[d]);
        }
      }
    } else {
      std::memcpy(static_cast<float*>(cache.k) + slot * kv_row, k + i * k_stride, row_bytes);
      std::memcpy(static_cast<float*>(cache.v) + slot * kv_row, v + i * v_stride, row_bytes);
    }
  });
}

void attention(const float* q, int64_t q_stride, const float* k, int64_t k_stride, const float* v,
               int64_t v_stride, const AttentionBatch& batch, const AttentionShape& shape,
               KvCacheLayer cache, float* out) {
  KILN_CHECK(shape.num_kv_heads > 0 && shape.num_heads % shape.num_kv_heads == 0);
  KILN_CHECK(shape.head_dim > 0 && cache.block_size > 0);
  kv_cache_store(k, k_stride, v, v_stride, batch, shape.num_kv_heads, shape.head_dim, cache);
  switch (cache.element) {
    case KvCacheDtype::kBF16: return attend_cached<uint16_t>(q, q_stride, batch, shape, cache, out);
    case KvCacheDtype::kFP8: return attend_cached<uint8_t>(q, q_stride, batch, shape, cache, out);
    case KvCacheDtype::kF32: return attend_cached<float>(q, q_stride, batch, shape, cache, out);
  }
}

}  // namespace kiln::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
