#include "backends/cpu/layers/norm.h"

#include <cmath>

#include "backends/cpu/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kParallelMin = int64_t{1} << 14;  // elements; below this stay on one thread

// Row statistics are summed in double: it costs little next to the matmuls around a norm, and it
// keeps rows of many thousand elements at full fp32 accuracy. The `omp simd` reduction lets the
// compiler split the sum into vector lanes.
double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

double sum(const float* x, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}

double sum_squared_deviation(const float* x, int64_t n, double mean) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    s += d * d;
  }
  return s;
}

}  // namespace

void rms_norm(const float* x, int64_t m, int64_t h, const float* weight, float eps, float* y) {
  parallel_for(0, m, m * h >= kParallelMin, [&](int64_t i) {
    const float* row = x + i * h;
    float* out = y + i * h;
    // HF: variance = mean(x^2) in fp32; x * rsqrt(variance + eps); then weight * that.
    const auto variance = static_cast<float>(sum_squares(row, h) / static_cast<double>(h));
    const float inv_rms = 1.0f / std::sqrt(variance + eps);
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) out[j] = weight[j] * (row[j] * inv_rms);
  });
}

void layer_norm(const float* x, int64_t m, int64_t h, const float* weight, const float* bias,
                float eps, float* y) {
  parallel_for(0, m, m * h >= kParallelMin, [&](int64_t i) {
    const float* row = x + i * h;
    float* out = y + i * h;
    // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
    const double mean_d = sum(row, h) / static_cast<double>(h);
    const auto variance =
        static_cast<float>(sum_squared_deviation(row, h, mean_d) / static_cast<double>(h));
    const auto mean = static_cast<float>(mean_d);
    const float inv_std = 1.0f / std::sqrt(variance + eps);
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) out[j] = (row[j] - mean) * inv_std * weight[j] + bias[j];
  });
}

}  // namespace kiln::cpu
