#include "backends/cuda/gemm/cuda_gemv.h"

#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/gemm/cuda_gemv_quant.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace kiln::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;      // 16-byte weight loads in flight per lane and row
constexpr int kDeepUnroll = 8;  // the "gemv_deep" kernels' (cuda_matmul.h)

// A weight row is read once: bypass L1 (the read-only path, no allocation).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

template <typename T>
struct Weights;

template <>
struct Weights<float> {
  static constexpr int kPerLoad = 4;
  __device__ static void widen(uint4 v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ static float one(const float* p) { return *p; }
};

template <>
struct Weights<__half> {
  static constexpr int kPerLoad = 8;
  __device__ static void widen(uint4 v, float* f) {
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &words[i], sizeof(h));
      const float2 p = __half22float2(h);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
  __device__ static float one(const __half* p) { return __half2float(*p); }
};

template <>
struct Weights<__nv_bfloat16> {
  static constexpr int kPerLoad = 8;
  __device__ static void widen(uint4 v, float* f) {
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(words[i] << 16);
      f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
  __device__ static float one(const __nv_bfloat16* p) { return __bfloat162float(*p); }
};

// acc[r] += w[0..E) . x[r, e0 .. e0+E) for every activation row r.
template <int M, int E>
__device__ __forceinline__ void fma_rows(const float* w, const float* x, int64_t k, int64_t e0, float* acc) {
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float4* x4 = reinterpret_cast<const float4*>(x + r * k + e0);
#pragma unroll
    for (int q = 0; q < E / 4; ++q) {
      const float4 xv = __ldg(x4 + q);
      acc[r] += w[4 * q] * xv.x + w[4 * q + 1] * xv.y + w[4 * q + 2] * xv.z + w[4 * q + 3] * xv.w;
    }
  }
}

__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }

// One warp per output column, or with P > 1, P warps of a block per column, each taking every
// P-th run of 32 loads of the weight row and their sums added in shared memory in a fixed order
// (more loads in flight for products of few columns). k is a multiple of the elements per
// 16-byte load and both x and w are 16-byte aligned. U: 16-byte weight loads in flight per lane
// and weight row. kGlu: the column reads two weight rows, `row` (gate) and `row + n` (up), and
// writes silu(gate) * up: y is [m, n] with w [2n, k] and bias [2n]. Launched behind another
// kernel (cuda_launch.cuh), it lets the next kernel launch once its warps have read all their
// weights.
template <typename T, int M, int U, bool kGlu, int P = 1>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const float* x, int64_t k, const T* w, int64_t n,
                                                        const float* bias, float* y) {
  static_assert(kWarps % P == 0, "a block holds whole columns");
  wait_for_prior_kernels();
  using W = Weights<T>;
  constexpr int E = W::kPerLoad;
  constexpr int R = kGlu ? 2 : 1;  // weight rows per column
  constexpr int S = 32 * P;        // loads between a lane's consecutive ones
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int part = warp % P;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kWarps / P) + warp / P;
  const bool live = row < n;
  if (P == 1 && !live) return;
  const uint4* wrow[R];
#pragma unroll
  for (int j = 0; j < R; ++j) wrow[j] = reinterpret_cast<const uint4*>(w + (live ? row + j * n : 0) * k);
  float acc[R][M] = {};
  const int64_t nv = live ? k / E : 0;
  int64_t v = lane + 32 * part;
  for (; v + S * (U - 1) < nv; v += S * U) {
    uint4 buf[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < R; ++j) buf[j][u] = load_stream(wrow[j] + v + S * u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        float wf[E];
        W::widen(buf[j][u], wf);
        fma_rows<M, E>(wf, x, k, (v + S * u) * E, acc[j]);
      }
    }
  }
  for (; v < nv; v += S) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      float wf[E];
      W::widen(load_stream(wrow[j] + v), wf);
      fma_rows<M, E>(wf, x, k, v * E, acc[j]);
    }
  }
  allow_next_kernel();
  [[maybe_unused]] __shared__ float parts[P > 1 ? kWarps : 1][R][M];
#pragma unroll
  for (int r = 0; r < M; ++r) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      for (int o = 16; o > 0; o >>= 1) acc[j][r] += __shfl_xor_sync(0xffffffffu, acc[j][r], o);
      if constexpr (P > 1) {
        if (lane == 0) parts[warp][j][r] = acc[j][r];
      }
    }
  }
  if constexpr (P > 1) {
    __syncthreads();
    if (part != 0 || !live) return;
#pragma unroll
    for (int r = 0; r < M; ++r) {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        for (int p = 1; p < P; ++p) acc[j][r] += parts[warp + p][j][r];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float s[R];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      s[j] = acc[j][r];
      if (bias != nullptr) s[j] += bias[row + j * n];
    }
    if (lane == 0) y[r * n + row] = kGlu ? silu_f(s[0]) * s[R - 1] : s[0];
  }
}

// Any k and alignment, m < kGemvMaxRows at run time: one element per lane and step (the path of
// odd shapes, which no large model has).
template <typename T, bool kGlu>
__global__ void __launch_bounds__(kThreads) gemv_scalar_kernel(const float* x, int m, int64_t k, const T* w,
                                                               int64_t n, const float* bias, float* y) {
  kernel_prologue();
  using W = Weights<T>;
  constexpr int R = kGlu ? 2 : 1;
  constexpr int kRows = static_cast<int>(kGemvMaxRows) - 1;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= n) return;
  float acc[R][kRows] = {};
  for (int64_t e = lane; e < k; e += 32) {
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const float wv = W::one(w + (row + j * n) * k + e);
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

template <typename T, int M, int U, bool kGlu, int P = 1>
void launch_vec(const float* x, int64_t k, const T* w, int64_t n, const float* bias, float* y, cudaStream_t stream) {
  constexpr int kColumns = kWarps / P;
  const auto blocks = static_cast<unsigned>((n + kColumns - 1) / kColumns);
  launch(gemv_kernel<T, M, U, kGlu, P>, blocks, kThreads, 0, stream, x, k, w, n, bias, y);
}

// kDeep and kPair: the deep and the paired kernels, instantiated for single-row steps of
// half-precision weights (batch-1 decode, where they can pay); other steps take the plain one.
template <typename T, bool kGlu>
void launch_typed(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias, float* y,
                  GemvVariant variant, cudaStream_t stream) {
  const T* wt = static_cast<const T*>(w);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (!aligned || k % Weights<T>::kPerLoad != 0) {
    const auto blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
    launch(gemv_scalar_kernel<T, kGlu>, blocks, kThreads, 0, stream, x, static_cast<int>(m), k, wt, n, bias, y);
    return;
  }
  switch (m) {
    case 1:
      if (variant == GemvVariant::kDeep && !std::is_same_v<T, float>) return launch_vec<T, 1, kDeepUnroll, kGlu>(x, k, wt, n, bias, y, stream);
      if (variant == GemvVariant::kPair && !std::is_same_v<T, float>) return launch_vec<T, 1, kUnroll, kGlu, 2>(x, k, wt, n, bias, y, stream);
      return launch_vec<T, 1, kUnroll, kGlu>(x, k, wt, n, bias, y, stream);
    case 2: return launch_vec<T, 2, kUnroll, kGlu>(x, k, wt, n, bias, y, stream);
    case 3: return launch_vec<T, 3, kUnroll, kGlu>(x, k, wt, n, bias, y, stream);
    case 4: return launch_vec<T, 4, kUnroll, kGlu>(x, k, wt, n, bias, y, stream);
    case 5: return launch_vec<T, 5, kUnroll, kGlu>(x, k, wt, n, bias, y, stream);
    case 6: return launch_vec<T, 6, kUnroll, kGlu>(x, k, wt, n, bias, y, stream);
    default: return launch_vec<T, 7, kUnroll, kGlu>(x, k, wt, n, bias, y, stream);
  }
}

template <bool kGlu>
void launch_format(ir::WeightFormat format, GemvVariant variant, const float* x, int64_t m, int64_t k, const void* w,
                   int64_t n, const float* bias, float* y, cudaStream_t stream) {
  if (gemv_quant_supports(format)) {
    return launch_gemv_quant(format, kGlu, x, m, k, w, n, bias, y, stream, variant == GemvVariant::kQ8);
  }
  switch (format) {
    case ir::WeightFormat::kF16: return launch_typed<__half, kGlu>(x, m, k, w, n, bias, y, variant, stream);
    case ir::WeightFormat::kBF16: return launch_typed<__nv_bfloat16, kGlu>(x, m, k, w, n, bias, y, variant, stream);
    default: return launch_typed<float, kGlu>(x, m, k, w, n, bias, y, variant, stream);
  }
}

}  // namespace

bool gemv_supports(ir::WeightFormat format) {
  return format == ir::WeightFormat::kF32 || format == ir::WeightFormat::kF16 || format == ir::WeightFormat::kBF16 ||
         gemv_quant_supports(format);
}

void launch_gemv(ir::WeightFormat format, const float* x, int64_t m, int64_t k, const void* w, int64_t n,
                 const float* bias, float* y, cudaStream_t stream, GemvVariant variant) {
  if (m <= 0 || n <= 0) return;
  static_assert(kGemvMaxRows == 8, "launch_typed instantiates m = 1 .. 7");
  launch_format<false>(format, variant, x, m, k, w, n, bias, y, stream);
}

void launch_gemv_silu_mul(ir::WeightFormat format, const float* x, int64_t m, int64_t k, const void* w, int64_t n,
                          const float* bias, float* y, cudaStream_t stream, GemvVariant variant) {
  if (m <= 0 || n <= 0) return;
  launch_format<true>(format, variant, x, m, k, w, n, bias, y, stream);
}

}  // namespace kiln::cuda
