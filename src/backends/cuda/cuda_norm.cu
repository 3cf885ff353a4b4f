#include "backends/cuda/cuda_norm.h"

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
__global__ void rms_norm_kernel(const float* x, int64_t h, const float* weight, float eps, float* y) {
  __shared__ double scratch[kThreads / 32];
  const float* row = x + blockIdx.x * h;
  float* out = y + blockIdx.x * h;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < h; j += kThreads) s += static_cast<double>(row[j]) * static_cast<double>(row[j]);
  const auto variance = static_cast<float>(block_sum(s, scratch) / static_cast<double>(h));
  const float inv_rms = 1.0f / sqrtf(variance + eps);
  for (int64_t j = threadIdx.x; j < h; j += kThreads) out[j] = weight[j] * (row[j] * inv_rms);
}

__global__ void layer_norm_kernel(const float* x, int64_t h, const float* weight, const float* bias, float eps,
                                  float* y) {
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

__global__ void add_rms_norm_kernel(const float* a, const float* b, int64_t h, const float* weight, float eps,
                                    float* sum, float* y) {
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
  for (int64_t j = threadIdx.x; j < h; j += kThreads) y[row + j] = weight[j] * (sum[row + j] * inv_rms);
}

}  // namespace

void launch_add_rms_norm(const float* a, const float* b, int64_t m, int64_t h, const float* weight, float eps,
                         float* sum, float* y, cudaStream_t stream) {
  if (m > 0) add_rms_norm_kernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(a, b, h, weight, eps, sum, y);
}

void launch_rms_norm(const float* x, int64_t m, int64_t h, const float* weight, float eps, float* y,
                     cudaStream_t stream) {
  if (m > 0) rms_norm_kernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, h, weight, eps, y);
}

void launch_layer_norm(const float* x, int64_t m, int64_t h, const float* weight, const float* bias, float eps,
                       float* y, cudaStream_t stream) {
  if (m > 0) layer_norm_kernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, h, weight, bias, eps, y);
}

}  // namespace kiln::cuda
