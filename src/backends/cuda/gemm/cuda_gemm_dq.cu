#include "backends/cuda/gemm/cuda_gemm_dq.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/gemm/cuda_mma.cuh"
#include "backends/cuda/gemm/cuda_quant.cuh"

namespace kiln::cuda {
namespace {

using F = ir::WeightFormat;

// A block computes a tile of kRows activation rows x kCols weight rows, sweeping k in steps of
// kDepth (a multiple of every group size, so that a step holds whole 16-byte chunks). Its eight
// warps form a 2 x 4 grid of 32 x 32 output tiles: 2 x 4 mma.sync m16n8k16 a 16-deep slice.
// Shared memory holds both operands of a step in fp16, rows padded by 8 elements so that the eight
// rows an ldmatrix reads fall in different banks, twice (the next step's activations arrive in one
// buffer while the warps multiply the other; the next step's weights wait in registers). At most
// 128 registers a thread, so that two blocks share a multiprocessor.
constexpr int kRows = 64;
constexpr int kCols = 128;
constexpr int kDepth = 128;
constexpr int kThreads = 256;
constexpr int kLd = kDepth + 8;  // elements a shared row
constexpr int kStageElems = (kRows + kCols) * kLd;
constexpr size_t kSharedBytes = 2 * kStageElems * sizeof(__half);

// Bytes b and b + 1 of u (each an unsigned value v) as the fp16 pair {v - bias, v' - bias}: placed
// under the exponent of 1024, whose fp16 unit is 1, then the bias and 1024 subtracted (exact).
template <int B>
__device__ __forceinline__ __half2 bytes_as_half2(uint32_t u, __half2 bias) {
  const uint32_t h = __byte_perm(u, 0x64646464u, B == 0 ? 0x4140u : 0x4342u);
  return __hsub2(*reinterpret_cast<const __half2*>(&h), bias);
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

template <F Fmt>
struct WeightStep {
  static constexpr int kChunksPerRow = static_cast<int>(quant_chunks_per_row<Fmt>(kDepth));
  static constexpr int kPerThread = kCols * kChunksPerRow / kThreads;
  QuantChunk chunk[kPerThread];
  int row[kPerThread];  // within the tile
};

// Reads this thread's chunks of weight rows [n0, n0 + kCols) x columns [k0, k0 + kDepth). Rows
// past n read row n - 1: their products land in columns that are never stored.
template <F Fmt>
__device__ __forceinline__ void load_weights(WeightStep<Fmt>& s, const uint8_t* w, size_t row_bytes, int64_t n,
                                             int64_t n0, int64_t k0) {
  using S = WeightStep<Fmt>;
#pragma unroll
  for (int j = 0; j < S::kPerThread; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    s.row[j] = i / S::kChunksPerRow;
    const int64_t r = min(n0 + s.row[j], n - 1);
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    s.chunk[j] = quant_load_chunk<Fmt>(row, k0 / kDepth * S::kChunksPerRow + i % S::kChunksPerRow);
  }
}

// Widens the chunks into ws [kCols][kLd] in fp16: int8 and int4 values exactly, a group's (times
// its fp16 scale, one rounding: launch_dequantize's value); i8c leaves its row scale to the sums.
template <F Fmt>
__device__ __forceinline__ void store_weights(const WeightStep<Fmt>& s, __half* ws, int64_t k0) {
  using Q = QuantFormat<Fmt>;
  const __half2 bias = __float2half2_rn(Q::kInt4 ? 1024.0f + 8.0f : 1024.0f + 128.0f);
#pragma unroll
  for (int j = 0; j < WeightStep<Fmt>::kPerThread; ++j) {
    const __half2 scale = __float2half2_rn(s.chunk[j].scale);  // a group's fp16 scale, exactly; 1 for i8c
    uint32_t lo[8], hi[8];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint32_t q = s.chunk[j].q[t];
      const uint32_t a = Q::kInt4 ? q & 0x0F0F0F0Fu : q ^ 0x80808080u;
      __half2 p0 = bytes_as_half2<0>(a, bias), p1 = bytes_as_half2<1>(a, bias);
      if constexpr (!Q::kChannel) {
        p0 = __hmul2(p0, scale);
        p1 = __hmul2(p1, scale);
      }
      lo[2 * t] = half2_bits(p0);
      lo[2 * t + 1] = half2_bits(p1);
      if constexpr (Q::kInt4) {
        const uint32_t b = (q >> 4) & 0x0F0F0F0Fu;
        hi[2 * t] = half2_bits(__hmul2(bytes_as_half2<0>(b, bias), scale));
        hi[2 * t + 1] = half2_bits(__hmul2(bytes_as_half2<1>(b, bias), scale));
      }
    }
    __half* dst = ws + s.row[j] * kLd + static_cast<int>(s.chunk[j].e0 - k0);
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
    if constexpr (Q::kInt4) {
      reinterpret_cast<uint4*>(dst + Q::kGroup / 2)[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      reinterpret_cast<uint4*>(dst + Q::kGroup / 2)[1] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
    }
  }
}

// Activation rows [m0, m0 + kRows) x columns [k0, k0 + kDepth) into xs [kRows][kLd], by cp.async;
// rows past m are zero.
__device__ __forceinline__ void load_activations(const __half* x, int64_t m, int64_t k, int64_t m0, int64_t k0,
                                                 __half* xs) {
  constexpr int kPieces = kDepth / 8;  // 16-byte pieces a row
#pragma unroll
  for (int j = 0; j < kRows * kPieces / kThreads; ++j) {
    const int i = j * kThreads + static_cast<int>(threadIdx.x);
    const int r = i / kPieces, p = i % kPieces;
    const bool read = m0 + r < m;
    cp_async16(xs + r * kLd + 8 * p, read ? x + (m0 + r) * k + k0 + 8 * p : x, read);
  }
  cp_async_commit();
}

// Split z of the grid sums k-steps [z * steps_per, (z + 1) * steps_per) into y + z * m * n (the
// caller's partial sums when the grid has several splits; then bias is null).
template <F Fmt>
__global__ void __launch_bounds__(kThreads, 2)
    gemm_dq_kernel(const __half* x, int64_t m, int64_t k, const uint8_t* w, size_t row_bytes, int64_t n,
                   const float* bias, float* y, int64_t steps_per) {
  kernel_prologue();
  extern __shared__ __align__(16) __half shared[];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols, m0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm = (warp / 4) * 32, wn = (warp % 4) * 32;  // the warp's output tile in the block's
  float acc[2][4][4] = {};

  const int64_t first = blockIdx.z * steps_per;
  const int64_t steps = min(steps_per, k / kDepth - first);
  y += static_cast<int64_t>(blockIdx.z) * m * n;
  WeightStep<Fmt> next;
  load_weights(next, w, row_bytes, n, n0, first * kDepth);
  load_activations(x, m, k, m0, first * kDepth, shared);
  for (int64_t step = 0; step < steps; ++step) {
    __half* xs = shared + (step & 1) * kStageElems;
    __half* ws = xs + kRows * kLd;
    store_weights(next, ws, (first + step) * kDepth);
    cp_async_wait_all();
    __syncthreads();
    if (step + 1 < steps) {
      load_activations(x, m, k, m0, (first + step + 1) * kDepth, shared + ((step + 1) & 1) * kStageElems);
      load_weights(next, w, row_bytes, n, n0, (first + step + 1) * kDepth);
    }
#pragma unroll
    for (int kk = 0; kk < kDepth; kk += 16) {
      // A (16 x 16, rows x k): matrices {rows 0-7, 8-15} x {k 0-7, 8-15}, in a0..a3's order.
      // B (k x 8, a weight row a column): matrices {k 0-7, 8-15} x {weight rows 0-7, 8-15}, b[j]
      // and b[j + 1].
      uint32_t a[2][4], b[4][2];
      const int mat = lane / 8, mrow = lane % 8;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        ldmatrix_x4(a[i], xs + (wm + 16 * i + mrow + 8 * (mat & 1)) * kLd + kk + 8 * (mat >> 1));
      }
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        uint32_t r[4];
        ldmatrix_x4(r, ws + (wn + 8 * j + mrow + 8 * (mat >> 1)) * kLd + kk + 8 * (mat & 1));
        b[j][0] = r[0];
        b[j][1] = r[1];
        b[j + 1][0] = r[2];
        b[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) Operand<__half>::mma(acc[i][j], a[i], b[j][0], b[j][1]);
      }
    }
  }
  // acc[i][j]: rows wm + 16 i + g (+ 8), columns wn + 8 j + 2 t (+ 1); i8c's row scales now.
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t col = n0 + wn + 8 * j + 2 * t;
    float scale[2] = {1.0f, 1.0f};
    if constexpr (QuantFormat<Fmt>::kChannel) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (col + e < n) scale[e] = quant_channel_scale(w + static_cast<size_t>(col + e) * row_bytes, k);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + wm + 16 * i + g + 8 * h;
        if (row >= m) continue;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + e < n) {
            y[row * n + col + e] = acc[i][j][2 * h + e] * scale[e] + (bias != nullptr ? bias[col + e] : 0.0f);
          }
        }
      }
    }
  }
}

// y[i] = sum over the splits of parts[s * count + i] in order (+ bias[i % n]).
__global__ void sum_splits_kernel(const float* parts, int splits, int64_t count, int64_t n, const float* bias,
                                  float* y) {
  kernel_prologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    float v = parts[i];
    for (int s = 1; s < splits; ++s) v += parts[s * count + i];
    y[i] = bias != nullptr ? v + bias[i % n] : v;
  }
}

int multiprocessors() {
  static const int count = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return 132;
    }
    return sms;
  }();
  return count;
}

// Splits of k: enough blocks for about four a multiprocessor, each at least two steps long.
int64_t splits_for(int64_t m, int64_t n, int64_t k) {
  const int64_t tiles = ((n + kCols - 1) / kCols) * ((m + kRows - 1) / kRows);
  const int64_t steps = k / kDepth;
  const int64_t want = (4 * multiprocessors() + tiles - 1) / tiles;
  return std::clamp<int64_t>(want, 1, std::max<int64_t>(1, steps / 2));
}

template <F Fmt>
Status launch_typed(const __half* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, const float* bias, float* y,
                    float* parts, cudaStream_t stream) {
  static std::once_flag once;
  static cudaError_t allowed = cudaSuccess;
  std::call_once(once, [] {
    allowed = cudaFuncSetAttribute(reinterpret_cast<const void*>(gemm_dq_kernel<Fmt>),
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes));
  });
  KILN_CUDA_RETURN_IF_ERROR(allowed);
  const int64_t steps = k / kDepth;
  const int64_t splits = parts != nullptr ? splits_for(m, n, k) : 1;
  const int64_t steps_per = (steps + splits - 1) / splits;
  const auto used = static_cast<unsigned>((steps + steps_per - 1) / steps_per);
  const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols), static_cast<unsigned>((m + kRows - 1) / kRows), used);
  launch(gemm_dq_kernel<Fmt>, grid, kThreads, kSharedBytes, stream, x, m, k, w, ir::weight_format_row_bytes(Fmt, k),
         n, used > 1 ? nullptr : bias, used > 1 ? parts : y, steps_per);
  KILN_CUDA_RETURN_IF_LAUNCH_FAILED("gemm_dq");
  if (used > 1) {
    const int64_t count = m * n;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 4 * multiprocessors()));
    launch(sum_splits_kernel, blocks, 256, 0, stream, parts, static_cast<int>(used), count, n, bias, y);
    KILN_CUDA_RETURN_IF_LAUNCH_FAILED("gemm_dq split sums");
  }
  return Status::ok();
}

template <F Fmt>
bool fits_typed(int64_t k) {
  return k % kDepth == 0 && quant_vector_fits<Fmt>(k);
}

}  // namespace

bool gemm_dq_fits(ir::WeightFormat format, int64_t m, int64_t k, const void* w) {
  if (m > kGemmDqMaxRows || k <= 0 || reinterpret_cast<uintptr_t>(w) % 4 != 0) return false;
  switch (format) {
    case F::kI8Channel: return fits_typed<F::kI8Channel>(k);
    case F::kI8Group32: return fits_typed<F::kI8Group32>(k);
    case F::kI8Group128: return fits_typed<F::kI8Group128>(k);
    case F::kI4Group32: return fits_typed<F::kI4Group32>(k);
    case F::kI4Group128: return fits_typed<F::kI4Group128>(k);
    default: return false;
  }
}

size_t gemm_dq_scratch_bytes(int64_t m, int64_t n, int64_t k) {
  const int64_t splits = splits_for(m, n, k);
  return splits > 1 ? static_cast<size_t>(splits * m * n) * sizeof(float) : 0;
}

Status launch_gemm_dq(ir::WeightFormat format, const void* x16, int64_t m, int64_t k, const void* w, int64_t n,
                      const float* bias, float* y, void* scratch, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return Status::ok();
  if (!gemm_dq_fits(format, m, k, w)) return invalid_argument("gemm_dq does not take this product");
  const auto* x = static_cast<const __half*>(x16);
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* parts = static_cast<float*>(scratch);
  switch (format) {
    case F::kI8Channel: return launch_typed<F::kI8Channel>(x, m, k, wb, n, bias, y, parts, stream);
    case F::kI8Group32: return launch_typed<F::kI8Group32>(x, m, k, wb, n, bias, y, parts, stream);
    case F::kI8Group128: return launch_typed<F::kI8Group128>(x, m, k, wb, n, bias, y, parts, stream);
    case F::kI4Group32: return launch_typed<F::kI4Group32>(x, m, k, wb, n, bias, y, parts, stream);
    case F::kI4Group128: return launch_typed<F::kI4Group128>(x, m, k, wb, n, bias, y, parts, stream);
    default: return invalid_argument("gemm_dq: not an integer format");
  }
}

}  // namespace kiln::cuda
