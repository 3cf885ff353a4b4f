#include "backends/cuda/gemm/cuda_gemv_quant.h"

#include <cuda_fp16.h>

#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/gemm/cuda_quant.cuh"

namespace kiln::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

using F = ir::WeightFormat;

__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }

__device__ __forceinline__ float dot4(const float* v, float4 x) { return v[0] * x.x + v[1] * x.y + v[2] * x.z + v[3] * x.w; }

// acc[i][r] += scale_i * (chunk i's weights . x[r, their elements]) for the W weight rows of
// chunks ch[0..W), which share their columns, and the first m activation rows: each activation
// float4 is read once for all W rows (the activations, not the weights, would otherwise be most
// of what the SM reads: 4 or 8 bytes of them per weight byte).
template <F Fmt, int M, int W>
__device__ __forceinline__ void fma_chunks(const QuantChunk* ch, const float* x, int64_t k, int m, float (*acc)[M]) {
  using Q = QuantFormat<Fmt>;
  float part[W][M] = {};
  const int64_t e0 = ch[0].e0;
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    float4 lo[M], hi[M];
#pragma unroll
    for (int r = 0; r < M; ++r) {
      if (r >= m) break;
      lo[r] = __ldg(reinterpret_cast<const float4*>(x + r * k + e0) + t);
      if constexpr (Q::kInt4) hi[r] = __ldg(reinterpret_cast<const float4*>(x + r * k + e0 + Q::kGroup / 2) + t);
    }
#pragma unroll
    for (int i = 0; i < W; ++i) {
      float v[Q::kInt4 ? 8 : 4];
      quant_unpack_word<Fmt>(ch[i].q[t], v);
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= m) break;
        part[i][r] += dot4(v, lo[r]);
        if constexpr (Q::kInt4) part[i][r] += dot4(v + 4, hi[r]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < W; ++i) {
#pragma unroll
    for (int r = 0; r < M; ++r) acc[i][r] += ch[i].scale * part[i][r];
  }
}

// A run of 16 activations quantised to int8, four to a word (element j of the run in byte j % 4
// of word j / 4, as the weights' bytes sit), with its scale: x ~ d * q.
struct Q8Run {
  int q[4];
  float d;
};

__device__ __forceinline__ int pack_int8(int a, int b, int c, int d) {
  const unsigned ab = __byte_perm(static_cast<unsigned>(a), static_cast<unsigned>(b), 0x0040u);
  const unsigned cd = __byte_perm(static_cast<unsigned>(c), static_cast<unsigned>(d), 0x0040u);
  return static_cast<int>(__byte_perm(ab, cd, 0x5410u));
}

// x: 16 floats, 16-byte aligned, into v; returns their largest magnitude.
__device__ __forceinline__ float load_run(const float* x, float4 (&v)[4]) {
#pragma unroll
  for (int t = 0; t < 4; ++t) v[t] = __ldg(reinterpret_cast<const float4*>(x) + t);
  float amax = 0.0f;
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[t].x), fabsf(v[t].y)), fmaxf(fabsf(v[t].z), fabsf(v[t].w))));
  }
  return amax;
}

// x: 16 floats, 16-byte aligned. Scale max|x| / 127, each value rounded to the nearest step.
__device__ __forceinline__ Q8Run quantize_run(const float* x) {
  float4 v[4];
  const float amax = load_run(x, v);
  Q8Run r;
  r.d = amax * (1.0f / 127.0f);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    r.q[t] = pack_int8(__float2int_rn(v[t].x * inv), __float2int_rn(v[t].y * inv), __float2int_rn(v[t].z * inv),
                       __float2int_rn(v[t].w * inv));
  }
  return r;
}

// acc[i][0] += scale_i * (chunk i's weights . x[their elements]) for W weight rows that share
// their columns, one activation row: the chunk's runs of activations are quantised once for all
// W rows, and each word of four weights is one dp4a. Int4 nibbles are 0..15, the weight plus 8:
// the run's sum of q, times 8, comes off.
template <F Fmt, int W>
__device__ __forceinline__ void dot_chunks_q8(const QuantChunk* ch, const float* x, float (*acc)[1]) {
  using Q = QuantFormat<Fmt>;
  const Q8Run lo = quantize_run(x + ch[0].e0);
  if constexpr (!Q::kInt4) {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      int s = 0;
#pragma unroll
      for (int t = 0; t < 4; ++t) s = __dp4a(static_cast<int>(ch[i].q[t]), lo.q[t], s);
      acc[i][0] += ch[i].scale * lo.d * static_cast<float>(s);
    }
  } else {
    const Q8Run hi = quantize_run(x + ch[0].e0 + Q::kGroup / 2);
    int sum_lo = 0, sum_hi = 0;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      sum_lo = __dp4a(lo.q[t], 0x01010101, sum_lo);
      sum_hi = __dp4a(hi.q[t], 0x01010101, sum_hi);
    }
#pragma unroll
    for (int i = 0; i < W; ++i) {
      int s_lo = -8 * sum_lo, s_hi = -8 * sum_hi;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        s_lo = __dp4a(static_cast<int>(ch[i].q[t] & 0x0F0F0F0Fu), lo.q[t], s_lo);
        s_hi = __dp4a(static_cast<int>((ch[i].q[t] >> 4) & 0x0F0F0F0Fu), hi.q[t], s_hi);
      }
      acc[i][0] += ch[i].scale * (lo.d * static_cast<float>(s_lo) + hi.d * static_cast<float>(s_hi));
    }
  }
}

// A run of 16 activations scaled by a power of two 2^-e to below 1 in magnitude and rounded to fp16,
// in pairs (elements 2i, 2i + 1 of the run in h[i]): x ~ d * h with d = 2^e.
struct H2Run {
  __half2 h[8];
  float d;
};

// x: 16 floats, 16-byte aligned. e from max|x|'s exponent field (max|x| < 2^e), so an all-zero or
// tiny run scales by at most 2^126.
__device__ __forceinline__ H2Run halve_run(const float* x) {
  float4 v[4];
  const float amax = load_run(x, v);
  const int e = static_cast<int>((__float_as_uint(amax) >> 23) & 0xffu) - 126;
  const float inv = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
  H2Run r;
  r.d = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    r.h[2 * t] = __floats2half2_rn(v[t].x * inv, v[t].y * inv);
    r.h[2 * t + 1] = __floats2half2_rn(v[t].z * inv, v[t].w * inv);
  }
  return r;
}

// acc[i][0] += (chunk i's fp8 weights . x[their elements]) for W weight rows that share their
// columns, one activation row, in half2: the chunk's run of activations is halved once for all W
// rows; each word of four weights is two conversions and two fused half2 products. The 16
// products of a run, each below 448 in magnitude, are summed in fp16 (relative rounding 2^-11 a
// step), then widened and scaled in fp32.
template <F Fmt, int W>
__device__ __forceinline__ void dot_chunks_h2(const QuantChunk* ch, const float* x, float (*acc)[1]) {
  const H2Run run = halve_run(x + ch[0].e0);
#pragma unroll
  for (int i = 0; i < W; ++i) {
    __half2 s = __float2half2_rn(0.0f);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      s = __hfma2(quant_e4m3x2_half(ch[i].q[t]), run.h[2 * t], s);
      s = __hfma2(quant_e4m3x2_half(ch[i].q[t] >> 16), run.h[2 * t + 1], s);
    }
    const float2 f = __half22float2(s);
    acc[i][0] += run.d * (f.x + f.y);
  }
}

// RW output columns per warp (kGlu: each reads rows `col` (gate) and `col + n` (up) and writes
// silu(gate) * up), as the float gemv (cuda_gemv.cu) otherwise: the lanes take the rows' chunks
// in turn, U at a time. m <= M activation rows. kQ8 (M = 1): dot_chunks_q8 (integer weights) or
// dot_chunks_h2 (fp8) instead of fma_chunks.
// It lets the next kernel launch (cuda_launch.cuh) once its warps have read all their weights.
template <F Fmt, int M, int RW, int U, bool kGlu, bool kQ8>
__global__ void __launch_bounds__(kThreads) gemv_quant_kernel(const float* x, int m, int64_t k, const uint8_t* w,
                                                              size_t row_bytes, int64_t n, const float* bias,
                                                              float* y) {
  wait_for_prior_kernels();
  using Q = QuantFormat<Fmt>;
  static_assert(!kQ8 || M == 1, "the reduced-activation path takes batch-1 steps");
  constexpr int R = kGlu ? 2 : 1;
  constexpr int W = RW * R;  // weight rows per warp
  constexpr float kUnit = kQ8 ? 1.0f : Q::kUnit;  // dot_chunks_h2 widens fp8 to its true values
  const int lane = threadIdx.x % 32;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * RW;
  if (col0 >= n) return;
  const uint8_t* wrow[W];
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int64_t col = col0 + i < n ? col0 + i : n - 1;  // past the end: recompute the last, store nothing
#pragma unroll
    for (int j = 0; j < R; ++j) wrow[i * R + j] = w + static_cast<size_t>(col + j * n) * row_bytes;
  }
  float acc[W][M] = {};
  const int64_t chunks = quant_chunks_per_row<Fmt>(k);
  int64_t c = lane;
  for (; c + 32 * (U - 1) < chunks; c += 32 * U) {
    QuantChunk ch[U][W];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < W; ++i) ch[u][i] = quant_load_chunk<Fmt>(wrow[i], c + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if constexpr (kQ8 && Q::kFp8) {
        dot_chunks_h2<Fmt, W>(ch[u], x, acc);
      } else if constexpr (kQ8) {
        dot_chunks_q8<Fmt, W>(ch[u], x, acc);
      } else {
        fma_chunks<Fmt, M, W>(ch[u], x, k, m, acc);
      }
    }
  }
  for (; c < chunks; c += 32) {
    QuantChunk ch[W];
#pragma unroll
    for (int i = 0; i < W; ++i) ch[i] = quant_load_chunk<Fmt>(wrow[i], c);
    if constexpr (kQ8 && Q::kFp8) {
      dot_chunks_h2<Fmt, W>(ch, x, acc);
    } else if constexpr (kQ8) {
      dot_chunks_q8<Fmt, W>(ch, x, acc);
    } else {
      fma_chunks<Fmt, M, W>(ch, x, k, m, acc);
    }
  }
  allow_next_kernel();
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int64_t col = col0 + i;
    if (col >= n) break;
    float row_scale[R];
#pragma unroll
    for (int j = 0; j < R; ++j) row_scale[j] = Q::kChannel ? quant_channel_scale(wrow[i * R + j], k) * kUnit : 1.0f;
#pragma unroll
    for (int r = 0; r < M; ++r) {
      if (r >= m) break;
      float s[R];
#pragma unroll
      for (int j = 0; j < R; ++j) {
        s[j] = acc[i * R + j][r];
        for (int o = 16; o > 0; o >>= 1) s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
        s[j] *= row_scale[j];
        if (bias != nullptr) s[j] += bias[col + j * n];
      }
      if (lane == 0) y[r * n + col] = kGlu ? silu_f(s[0]) * s[R - 1] : s[0];
    }
  }
}

// Any shape and alignment: one weight per lane and step, read bytewise (quant_element).
template <bool kGlu>
__global__ void __launch_bounds__(kThreads) gemv_quant_scalar_kernel(F format, const float* x, int m, int64_t k,
                                                                     const uint8_t* w, size_t row_bytes, int64_t n,
                                                                     const float* bias, float* y) {
  kernel_prologue();
  constexpr int R = kGlu ? 2 : 1;
  constexpr int kRows = static_cast<int>(kGemvMaxRows) - 1;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= n) return;
  float acc[R][kRows] = {};
  for (int64_t e = lane; e < k; e += 32) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const float wv = quant_element(format, w, row_bytes, k, row + j * n, e);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < m) acc[j][r] += wv * x[r * k + e];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= m) break;
    float s[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      s[j] = acc[j][r];
      for (int o = 16; o > 0; o >>= 1) s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
      if (bias != nullptr) s[j] += bias[row + j * n];
    }
    if (lane == 0) y[r * n + row] = kGlu ? silu_f(s[0]) * s[R - 1] : s[0];
  }
}

template <F Fmt, int M, int RW, int U, bool kGlu, bool kQ8 = false>
void launch_vec(const float* x, int64_t m, int64_t k, const uint8_t* w, size_t row_bytes, int64_t n,
                const float* bias, float* y, cudaStream_t stream) {
  const int64_t warps = (n + RW - 1) / RW;
  const auto blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  // Not a dependent launch: launched early, these products ran 6-13% slower a token (int8, int4 on
  // an H200), where the float GEMVs gain; they still let the next kernel launch early.
  launch_as(false, gemv_quant_kernel<Fmt, M, RW, U, kGlu, kQ8>, blocks, kThreads, 0, stream, x, static_cast<int>(m), k,
            w, row_bytes, n, bias, y);
}

// Batch-1 steps: 4 weight rows a warp (2 SwiGLU columns), 2 chunks of each in flight per lane;
// q8: over int8-quantised (integer weights) or fp16 (fp8 weights) runs of activations. Wider
// steps: one column a warp (its activations are M float4 a word already).
template <F Fmt, bool kGlu>
void launch_typed(const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, const float* bias, float* y,
                  bool q8, cudaStream_t stream) {
  const size_t row_bytes = ir::weight_format_row_bytes(Fmt, k);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 4 == 0;
  if (!aligned || !quant_vector_fits<Fmt>(k)) {
    const auto blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
    launch(gemv_quant_scalar_kernel<kGlu>, blocks, kThreads, 0, stream, Fmt, x, static_cast<int>(m), k, w, row_bytes,
           n, bias, y);
  } else if (m == 1 && q8) {
    launch_vec<Fmt, 1, kGlu ? 2 : 4, 2, kGlu, true>(x, m, k, w, row_bytes, n, bias, y, stream);
  } else if (m == 1) {
    launch_vec<Fmt, 1, kGlu ? 2 : 4, 2, kGlu>(x, m, k, w, row_bytes, n, bias, y, stream);
  } else {
    static_assert(kGemvMaxRows == 8, "the wide kernel takes m = 2 .. 7");
    launch_vec<Fmt, 7, 1, 2, kGlu>(x, m, k, w, row_bytes, n, bias, y, stream);
  }
}

template <bool kGlu>
void launch_format(F format, const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias,
                   float* y, bool q8, cudaStream_t stream) {
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (format) {
    case F::kI8Channel: return launch_typed<F::kI8Channel, kGlu>(x, m, k, wb, n, bias, y, q8, stream);
    case F::kI8Group32: return launch_typed<F::kI8Group32, kGlu>(x, m, k, wb, n, bias, y, q8, stream);
    case F::kI8Group128: return launch_typed<F::kI8Group128, kGlu>(x, m, k, wb, n, bias, y, q8, stream);
    case F::kI4Group32: return launch_typed<F::kI4Group32, kGlu>(x, m, k, wb, n, bias, y, q8, stream);
    case F::kI4Group128: return launch_typed<F::kI4Group128, kGlu>(x, m, k, wb, n, bias, y, q8, stream);
    case F::kF8E4M3: return launch_typed<F::kF8E4M3, kGlu>(x, m, k, wb, n, bias, y, q8, stream);
    default: return;
  }
}

}  // namespace

bool gemv_quant_supports(ir::WeightFormat format) {
  return ir::weight_format_is_quantized(format) && !ir::weight_format_is_panel(format);
}

void launch_gemv_quant(ir::WeightFormat format, bool glu, const float* x, int64_t m, int64_t k, const void* w,
                       int64_t n, const float* bias, float* y, cudaStream_t stream, bool q8) {
  if (m <= 0 || n <= 0) return;
  if (glu) {
    launch_format<true>(format, x, m, k, w, n, bias, y, q8, stream);
  } else {
    launch_format<false>(format, x, m, k, w, n, bias, y, q8, stream);
  }
}

}  // namespace kiln::cuda
