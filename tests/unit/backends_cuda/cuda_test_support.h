// Helpers for the CUDA backend's tests: skip without a supported GPU, device arrays that free
// themselves, random data, and error measures against a reference.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.h"

namespace kiln::cuda::testing {

// Empty when a supported GPU is present, else why the GPU tests skip.
inline std::string gpu_missing() {
  static const std::string reason = [] {
    auto device = cuda_device_info(0);
    if (!device) return device.status().message();
    Status st = cuda_device_supported(*device);
    return st ? std::string() : st.message();
  }();
  return reason;
}

#define KILN_REQUIRE_GPU()                                                                           \
  do {                                                                                               \
    const std::string kiln_missing = ::kiln::cuda::testing::gpu_missing();                           \
    if (!kiln_missing.empty()) GTEST_SKIP() << "no GPU for the CUDA tests: " << kiln_missing;        \
  } while (0)

#define KILN_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device array of T, filled from and read back into host vectors.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    // Poison: a kernel that skips an element shows up as NaN.
    EXPECT_EQ(cudaMemset(ptr_, 0xff, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void upload(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// max |a - b| / max |b|, NaN anywhere in a counting as infinite error.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0.0 ? err / scale : err;
}

}  // namespace kiln::cuda::testing
