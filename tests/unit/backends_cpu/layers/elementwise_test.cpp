#include "backends/cpu/layers/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
// Odd sizes, plus one large enough to take the multi-threaded path.
const std::vector<int64_t> kSizes = {1, 7, 83, 769, 5125, 40009};

std::vector<float> random_vector(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                  double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << "at index " << i;
  }
}

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

TEST(Elementwise, AddAndMulMatchDoubleReference) {
  for (int64_t n : kSizes) {
    const auto a = random_vector(n, -10.0f, 10.0f, 1);
    const auto b = random_vector(n, -10.0f, 10.0f, 2);
    std::vector<float> y(static_cast<size_t>(n), kNan);
    std::vector<double> sum(a.size()), prod(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      sum[i] = static_cast<double>(a[i]) + b[i];
      prod[i] = static_cast<double>(a[i]) * b[i];
    }
    add(a.data(), b.data(), n, y.data());
    expect_close(y, sum, 1e-7, 0.0);
    std::fill(y.begin(), y.end(), kNan);
    mul(a.data(), b.data(), n, y.data());
    expect_close(y, prod, 1e-7, 0.0);
  }
}

TEST(Elementwise, AddInPlace) {
  const auto a = random_vector(769, -1.0f, 1.0f, 3);
  const auto b = random_vector(769, -1.0f, 1.0f, 4);
  std::vector<float> expected(a.size());
  add(a.data(), b.data(), 769, expected.data());
  std::vector<float> y = a;
  add(y.data(), b.data(), 769, y.data());
  EXPECT_EQ(y, expected);
}

TEST(Elementwise, SiluMatchesDoubleReference) {
  for (int64_t n : kSizes) {
    auto x = random_vector(n, -20.0f, 20.0f, 5);
    std::vector<float> y(x.size(), kNan);
    silu(x.data(), n, y.data());
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = silu_ref(x[i]);
    expect_close(y, want, 1e-6, 1e-7);
  }
}

TEST(Elementwise, SiluStaysFiniteAtExtremes) {
  const std::vector<float> x = {-1000.0f, -100.0f, -88.0f, 0.0f, 88.0f, 1000.0f};
  std::vector<float> y(x.size(), kNan);
  silu(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(std::isfinite(y[i])) << "silu(" << x[i] << ")";
    EXPECT_NEAR(y[i], silu_ref(x[i]), 1e-6 * std::fabs(x[i]));
  }
  EXPECT_EQ(y[5], 1000.0f);
}

TEST(Elementwise, GeluTanhMatchesDoubleReference) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t n : kSizes) {
    auto x = random_vector(n, -8.0f, 8.0f, 6);
    std::vector<float> y(x.size(), kNan);
    gelu_tanh(x.data(), n, y.data());
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      want[i] = 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
    }
    expect_close(y, want, 1e-6, 1e-7);
  }
}

TEST(Elementwise, SiluMulMatchesDoubleReference) {
  for (int64_t m : {1, 7, 83}) {
    for (int64_t inter : {7, 83, 769}) {
      const auto x = random_vector(m * 2 * inter, -6.0f, 6.0f, static_cast<uint32_t>(m * inter));
      std::vector<float> y(static_cast<size_t>(m * inter), kNan);
      silu_mul(x.data(), m, inter, y.data());
      std::vector<double> want(y.size());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < inter; ++j) {
          const double gate = x[static_cast<size_t>(i * 2 * inter + j)];
          const double up = x[static_cast<size_t>(i * 2 * inter + inter + j)];
          want[static_cast<size_t>(i * inter + j)] = silu_ref(gate) * up;
        }
      }
      expect_close(y, want, 2e-6, 1e-7);
    }
  }
}

TEST(Elementwise, SiluMulLargeUsesAllRows) {
  // 5 rows of 5125: large enough for the parallel path; every output must be written.
  const int64_t m = 7, inter = 5125;
  const auto x = random_vector(m * 2 * inter, -3.0f, 3.0f, 9);
  std::vector<float> y(static_cast<size_t>(m * inter), kNan);
  silu_mul(x.data(), m, inter, y.data());
  for (int64_t i = 0; i < m * inter; ++i) {
    const int64_t r = i / inter, j = i % inter;
    const double want = silu_ref(x[static_cast<size_t>(r * 2 * inter + j)]) *
                        x[static_cast<size_t>(r * 2 * inter + inter + j)];
    ASSERT_NEAR(y[static_cast<size_t>(i)], want, 1e-7 + 2e-6 * std::fabs(want)) << i;
  }
}

}  // namespace
}  // namespace kiln::cpu
