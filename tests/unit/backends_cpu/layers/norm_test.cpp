#include "backends/cpu/layers/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_vector(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<double> rms_norm_ref(const std::vector<float>& x, int64_t m, int64_t h,
                                 const std::vector<float>& w, double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0.0;
    for (int64_t j = 0; j < h; ++j) ss += static_cast<double>(x[i * h + j]) * x[i * h + j];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
    for (int64_t j = 0; j < h; ++j) y[i * h + j] = w[j] * (x[i * h + j] * r);
  }
  return y;
}

std::vector<double> layer_norm_ref(const std::vector<float>& x, int64_t m, int64_t h,
                                   const std::vector<float>& w, const std::vector<float>& b,
                                   double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < m; ++i) {
    double mean = 0.0;
    for (int64_t j = 0; j < h; ++j) mean += x[i * h + j];
    mean /= static_cast<double>(h);
    double var = 0.0;
    for (int64_t j = 0; j < h; ++j) var += (x[i * h + j] - mean) * (x[i * h + j] - mean);
    var /= static_cast<double>(h);
    for (int64_t j = 0; j < h; ++j) {
      y[i * h + j] = (x[i * h + j] - mean) / std::sqrt(var + eps) * w[j] + b[j];
    }
  }
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << "at index " << i;
  }
}

TEST(Norm, RmsNormMatchesDoubleReference) {
  for (int64_t m : {1, 7, 83}) {
    for (int64_t h : {7, 83, 769, 5125}) {
      for (float eps : {1e-6f, 1e-5f}) {
        const auto x = random_vector(m * h, -3.0f, 3.0f, static_cast<uint32_t>(m * 31 + h));
        const auto w = random_vector(h, 0.5f, 1.5f, static_cast<uint32_t>(h));
        std::vector<float> y(x.size(), kNan);
        rms_norm(x.data(), m, h, w.data(), eps, y.data());
        expect_close(y, rms_norm_ref(x, m, h, w, eps), 2e-6, 1e-7);
      }
    }
  }
}

TEST(Norm, RmsNormInPlaceAndZeroRow) {
  const int64_t m = 3, h = 769;
  auto x = random_vector(m * h, -1.0f, 1.0f, 7);
  std::fill(x.begin() + h, x.begin() + 2 * h, 0.0f);  // row 1: all zeros -> zeros, not NaN
  const auto w = random_vector(h, -1.0f, 1.0f, 8);
  std::vector<float> expected(x.size(), kNan);
  rms_norm(x.data(), m, h, w.data(), 1e-6f, expected.data());
  for (int64_t j = 0; j < h; ++j) EXPECT_EQ(expected[h + j], 0.0f);
  rms_norm(x.data(), m, h, w.data(), 1e-6f, x.data());
  EXPECT_EQ(x, expected);
}

TEST(Norm, RmsNormLargeValues) {
  // Activations of a few thousand are common in the residual stream of large models.
  const int64_t m = 2, h = 5125;
  const auto x = random_vector(m * h, -3000.0f, 3000.0f, 11);
  const auto w = random_vector(h, 0.5f, 1.5f, 12);
  std::vector<float> y(x.size(), kNan);
  rms_norm(x.data(), m, h, w.data(), 1e-5f, y.data());
  expect_close(y, rms_norm_ref(x, m, h, w, 1e-5), 2e-6, 1e-7);
}

TEST(Norm, LayerNormMatchesDoubleReference) {
  for (int64_t m : {1, 7, 83}) {
    for (int64_t h : {7, 83, 769, 5125}) {
      const auto x = random_vector(m * h, -3.0f, 3.0f, static_cast<uint32_t>(m * 17 + h));
      const auto w = random_vector(h, 0.5f, 1.5f, static_cast<uint32_t>(h + 1));
      const auto b = random_vector(h, -1.0f, 1.0f, static_cast<uint32_t>(h + 2));
      std::vector<float> y(x.size(), kNan);
      layer_norm(x.data(), m, h, w.data(), b.data(), 1e-5f, y.data());
      expect_close(y, layer_norm_ref(x, m, h, w, b, 1e-5), 2e-6, 2e-6);
    }
  }
}

TEST(Norm, LayerNormLargeMeanDoesNotCancel) {
  // A row far from zero: a one-pass E[x^2] - E[x]^2 in fp32 would lose the variance entirely.
  const int64_t m = 4, h = 769;
  auto x = random_vector(m * h, -1.0f, 1.0f, 13);
  for (float& v : x) v += 1000.0f;
  const auto w = random_vector(h, 0.5f, 1.5f, 14);
  const auto b = random_vector(h, -1.0f, 1.0f, 15);
  std::vector<float> y(x.size(), kNan);
  layer_norm(x.data(), m, h, w.data(), b.data(), 1e-5f, y.data());
  // The input itself carries fp32 rounding of ~3e-5 at 1000; relative to a std of ~0.58, the
  // output can be off by ~1e-4 in the worst element.
  expect_close(y, layer_norm_ref(x, m, h, w, b, 1e-5), 1e-5, 2e-4);
}

TEST(Norm, LayerNormInPlace) {
  const int64_t m = 5, h = 83;
  auto x = random_vector(m * h, -2.0f, 2.0f, 16);
  const auto w = random_vector(h, 0.5f, 1.5f, 17);
  const auto b = random_vector(h, -1.0f, 1.0f, 18);
  std::vector<float> expected(x.size(), kNan);
  layer_norm(x.data(), m, h, w.data(), b.data(), 1e-5f, expected.data());
  layer_norm(x.data(), m, h, w.data(), b.data(), 1e-5f, x.data());
  EXPECT_EQ(x, expected);
}

}  // namespace
}  // namespace kiln::cpu
