#include "backends/cuda/layers/cuda_norm.h"

#include <cstdint>

#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/cuda_vec.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

// Sum of v over the block; every thread gets the result. `scratch` holds kThreads / 32 doubles.
__device__ double block_sum(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

// One block per row; x, y: [m, h].
template <typename Out>
__global__ void rms_norm_kernel(const float* x, int64_t h, const float* weight, float eps, Out* y) {
  kernel_prologue();
  __shared__ double scratch[kThreads / 32];
  const float* row = x + blockIdx.x * h;
  Out* out = y + blockIdx.x * h;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < h; j += kThreads) s += static_cast<double>(row[j]) * static_cast<double>(row[j]);
  const auto variance = static_cast<float>(block_sum(s, scratch) / static_cast<double>(h));
  const float inv_rms = 1.0f / sqrtf(variance + eps);
  for (int64_t j = threadIdx.x; j < h; j += kThreads) store1(out + j, weight[j] * (row[j] * inv_rms));
}

__global__ void layer_norm_kernel(const float* x, int64_t h, const float* weight, const float* bias, float eps,
                                  float* y) {
  kernel_prologue();
  __shared__ double scratch[kThreads / 32];
  const float* row = x + blockIdx.x * h;
  float* out = y + blockIdx.x * h;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < h; j += kThreads) s += static_cast<double>(row[j]);
  const double mean_d = block_sum(s, scratch) / static_cast<double>(h);
  // Squared deviations from the mean, a second pass: no cancellation of E[x^2] - E[x]^2.
  double d2 = 0.0;
  for (int64_t j = threadIdx.x; j < h; j += kThreads) {
    const double d = static_cast<double>(row[j]) - mean_d;
    d2 += d * d;
  }
  const auto variance = static_cast<float>(block_sum(d2, scratch) / static_cast<double>(h));
  const auto mean = static_cast<float>(mean_d);
  const float inv_std = 1.0f / sqrtf(variance + eps);
  for (int64_t j = threadIdx.x; j < h; j += kThreads) out[j] = (row[j] - mean) * inv_std * weight[j] + bias[j];
}

template <typename Out>
__global__ void add_rms_norm_kernel(const float* a, const float* b, int64_t h, const float* weight, float eps,
                                    float* sum, Out* y) {
  kernel_prologue();
  __shared__ double scratch[kThreads / 32];
  const int64_t row = blockIdx.x * h;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < h; j += kThreads) {
    const float v = a[row + j] + b[row + j];
    sum[row + j] = v;
    s += static_cast<double>(v) * static_cast<double>(v);
  }
  const auto variance = static_cast<float>(block_sum(s, scratch) / static_cast<double>(h));
  const float inv_rms = 1.0f / sqrtf(variance + eps);
  // Each thread reads back only the sums it wrote.
  for (int64_t j = threadIdx.x; j < h; j += kThreads) store1(y + row + j, weight[j] * (sum[row + j] * inv_rms));
}

// The row held in registers: thread t owns float4 slices t, t + kThreads, ... (kVecs of them),
// loaded all at once before any store, so that one memory round trip serves the whole row
// (the loops above wait for each load in turn: the stores may alias the inputs). kAdd: the
// residual add first (b and sum are read and written); otherwise y = rms_norm(a).
// h % 4 == 0, h <= 4 * kThreads * kVecs, every pointer 16-byte aligned.
template <int kVecs, bool kAdd, typename Out>
__global__ void __launch_bounds__(kThreads) rms_norm_rows_kernel(const float4* a, const float4* b, int64_t h4,
                                                                 const float4* weight, float eps, float4* sum,
                                                                 Out* y) {
  kernel_prologue();
  __shared__ double scratch[kThreads / 32];
  const int64_t row = blockIdx.x * h4;
  float4 v[kVecs], w[kVecs];
  double s = 0.0;
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t j = threadIdx.x + c * kThreads;
    if (j < h4) {
      v[c] = a[row + j];
      if (kAdd) {
        const float4 o = b[row + j];
        v[c] = make_float4(v[c].x + o.x, v[c].y + o.y, v[c].z + o.z, v[c].w + o.w);
      }
      w[c] = weight[j];
    }
  }
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t j = threadIdx.x + c * kThreads;
    if (j < h4) {
      if (kAdd) sum[row + j] = v[c];
      s += static_cast<double>(v[c].x) * v[c].x + static_cast<double>(v[c].y) * v[c].y +
           static_cast<double>(v[c].z) * v[c].z + static_cast<double>(v[c].w) * v[c].w;
    }
  }
  const auto variance = static_cast<float>(block_sum(s, scratch) / static_cast<double>(4 * h4));
  const float inv_rms = 1.0f / sqrtf(variance + eps);
#pragma unroll
  for (int c = 0; c < kVecs; ++c) {
    const int64_t j = threadIdx.x + c * kThreads;
    if (j < h4) {
      store4(y + 4 * (row + j), make_float4(w[c].x * (v[c].x * inv_rms), w[c].y * (v[c].y * inv_rms),
                                            w[c].z * (v[c].z * inv_rms), w[c].w * (v[c].w * inv_rms)));
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Launches rms_norm_rows_kernel when the row fits in registers; false when it does not.
template <bool kAdd, typename Out>
bool launch_rows(const float* a, const float* b, int64_t m, int64_t h, const float* weight, float eps, float* sum,
                 Out* y, cudaStream_t stream) {
  if (h % 4 != 0 || !aligned16(a) || !aligned16(weight) || !aligned16(y) || (kAdd && (!aligned16(b) || !aligned16(sum)))) {
    return false;
  }
  const int64_t h4 = h / 4, vecs = (h4 + kThreads - 1) / kThreads;
  const auto* a4 = reinterpret_cast<const float4*>(a);
  const auto* b4 = reinterpret_cast<const float4*>(b);
  const auto* w4 = reinterpret_cast<const float4*>(weight);
  auto* s4 = reinterpret_cast<float4*>(sum);
  const auto grid = static_cast<unsigned>(m);
  if (vecs <= 1) {
    launch(rms_norm_rows_kernel<1, kAdd, Out>, grid, kThreads, 0, stream, a4, b4, h4, w4, eps, s4, y);
  } else if (vecs <= 2) {
    launch(rms_norm_rows_kernel<2, kAdd, Out>, grid, kThreads, 0, stream, a4, b4, h4, w4, eps, s4, y);
  } else if (vecs <= 4) {
    launch(rms_norm_rows_kernel<4, kAdd, Out>, grid, kThreads, 0, stream, a4, b4, h4, w4, eps, s4, y);
  } else if (vecs <= 8) {
    launch(rms_norm_rows_kernel<8, kAdd, Out>, grid, kThreads, 0, stream, a4, b4, h4, w4, eps, s4, y);
  } else {
    return false;
  }
  return true;
}

// The residual add (unless b is null) and the RMSNorm, y of type Out.
template <typename Out>
void launch_norm(const float* a, const float* b, int64_t m, int64_t h, const float* weight, float eps, float* sum,
                 Out* y, cudaStream_t stream) {
  if (m <= 0) return;
  if (b != nullptr) {
    if (launch_rows<true>(a, b, m, h, weight, eps, sum, y, stream)) return;
    launch(add_rms_norm_kernel<Out>, static_cast<unsigned>(m), kThreads, 0, stream, a, b, h, weight, eps, sum, y);
  } else {
    if (launch_rows<false>(a, b, m, h, weight, eps, sum, y, stream)) return;
    launch(rms_norm_kernel<Out>, static_cast<unsigned>(m), kThreads, 0, stream, a, h, weight, eps, y);
  }
}

void launch_norm_as(const float* a, const float* b, int64_t m, int64_t h, const float* weight, float eps, float* sum,
                    void* y, ActivationType y_type, cudaStream_t stream) {
  switch (y_type) {
    case ActivationType::kF32: return launch_norm(a, b, m, h, weight, eps, sum, static_cast<float*>(y), stream);
    case ActivationType::kF16: return launch_norm(a, b, m, h, weight, eps, sum, static_cast<__half*>(y), stream);
    case ActivationType::kBF16:
      return launch_norm(a, b, m, h, weight, eps, sum, static_cast<__nv_bfloat16*>(y), stream);
  }
}

}  // namespace

void launch_add_rms_norm(const float* a, const float* b, int64_t m, int64_t h, const float* weight, float eps,
                         float* sum, void* y, cudaStream_t stream, ActivationType y_type) {
  launch_norm_as(a, b, m, h, weight, eps, sum, y, y_type, stream);
}

void launch_rms_norm(const float* x, int64_t m, int64_t h, const float* weight, float eps, void* y,
                     cudaStream_t stream, ActivationType y_type) {
  launch_norm_as(x, nullptr, m, h, weight, eps, nullptr, y, y_type, stream);
}

void launch_layer_norm(const float* x, int64_t m, int64_t h, const float* weight, const float* bias, float eps,
                       float* y, cudaStream_t stream) {
  if (m > 0) launch(layer_norm_kernel, static_cast<unsigned>(m), kThreads, 0, stream, x, h, weight, bias, eps, y);
}

}  // namespace kiln::cuda
