#include "backends/cuda/gemm/cuda_dequant.h"

#include <cuda_fp16.h>

#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/gemm/cuda_quant.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

using F = ir::WeightFormat;

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }

// 16 consecutive values, 16-byte stores (p 64- or 32-byte aligned).
__device__ __forceinline__ void store16(float* p, const float* v) {
#pragma unroll
  for (int i = 0; i < 4; ++i) reinterpret_cast<float4*>(p)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}
__device__ __forceinline__ void store16(__half* p, const float* v) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    uint4 u;
    unsigned* words = &u.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __half2 h = __floats2half2_rn(v[8 * i + 2 * j], v[8 * i + 2 * j + 1]);
      words[j] = *reinterpret_cast<const unsigned*>(&h);
    }
    reinterpret_cast<uint4*>(p)[i] = u;
  }
}

// One thread per chunk of 16 payload bytes (cuda_quant.cuh).
template <F Fmt, typename T>
__global__ void dequantize_kernel(const uint8_t* w, int64_t n, int64_t k, size_t row_bytes, T* out) {
  kernel_prologue();
  using Q = QuantFormat<Fmt>;
  const int64_t per_row = quant_chunks_per_row<Fmt>(k);
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= n * per_row) return;
  const int64_t r = i / per_row;
  const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
  const QuantChunk ch = quant_load_chunk<Fmt>(row, i % per_row);
  const float scale = Q::kChannel ? quant_channel_scale(row, k) * Q::kUnit : ch.scale;
  float lo[16], hi[16];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    float v[Q::kInt4 ? 8 : 4];
    quant_unpack_word<Fmt>(ch.q[t], v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo[4 * t + j] = scale * v[j];
      if constexpr (Q::kInt4) hi[4 * t + j] = scale * v[4 + j];
    }
  }
  T* o = out + r * k + ch.e0;
  store16(o, lo);
  if constexpr (Q::kInt4) store16(o + Q::kGroup / 2, hi);
}

template <typename T>
__global__ void dequantize_scalar_kernel(F format, const uint8_t* w, int64_t n, int64_t k, size_t row_bytes, T* out) {
  kernel_prologue();
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= n * k) return;
  store(out + i, quant_element(format, w, row_bytes, k, i / k, i % k));
}

unsigned blocks_for(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

template <F Fmt, typename T>
void launch_typed(const uint8_t* w, int64_t n, int64_t k, T* out, cudaStream_t stream) {
  const size_t row_bytes = ir::weight_format_row_bytes(Fmt, k);
  if (reinterpret_cast<uintptr_t>(w) % 4 != 0 || !quant_vector_fits<Fmt>(k)) {
    launch(dequantize_scalar_kernel<T>, blocks_for(n * k), kThreads, 0, stream, Fmt, w, n, k, row_bytes, out);
    return;
  }
  launch(dequantize_kernel<Fmt, T>, blocks_for(n * quant_chunks_per_row<Fmt>(k)), kThreads, 0, stream, w, n, k,
         row_bytes, out);
}

template <typename T>
void launch_format(F format, const uint8_t* w, int64_t n, int64_t k, T* out, cudaStream_t stream) {
  switch (format) {
    case F::kI8Channel: return launch_typed<F::kI8Channel>(w, n, k, out, stream);
    case F::kI8Group32: return launch_typed<F::kI8Group32>(w, n, k, out, stream);
    case F::kI8Group128: return launch_typed<F::kI8Group128>(w, n, k, out, stream);
    case F::kI4Group32: return launch_typed<F::kI4Group32>(w, n, k, out, stream);
    case F::kI4Group128: return launch_typed<F::kI4Group128>(w, n, k, out, stream);
    case F::kF8E4M3: return launch_typed<F::kF8E4M3>(w, n, k, out, stream);
    default: return;
  }
}

}  // namespace

void launch_dequantize(ir::WeightFormat format, const void* w, int64_t n, int64_t k, void* out, bool to_half,
                       cudaStream_t stream) {
  if (n <= 0 || k <= 0) return;
  const auto* wb = static_cast<const uint8_t*>(w);
  if (to_half) {
    launch_format(format, wb, n, k, static_cast<__half*>(out), stream);
  } else {
    launch_format(format, wb, n, k, static_cast<float*>(out), stream);
  }
}

}  // namespace kiln::cuda
