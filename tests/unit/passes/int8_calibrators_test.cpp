// The int8 calibrators (passes/int8_calibrators.h) on distributions whose right threshold is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "passes/int8_calibrators.h"

namespace kiln::passes {
namespace {

ActivationHistogram histogram_of(const std::vector<float>& x) {
  ActivationHistogram h;
  h.observe_range(x.data(), static_cast<int64_t>(x.size()));
  h.observe(x.data(), static_cast<int64_t>(x.size()));
  return h;
}

// 200,000 draws of N(0, 1) and ten outliers at +-50.
std::vector<float> gaussian_with_outliers() {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(200000);
  for (float& v : x) v = dist(rng);
  for (int i = 0; i < 10; ++i) x[static_cast<size_t>(i) * 1000] = i % 2 ? 50.0f : -50.0f;
  return x;
}

TEST(Int8Calibrators, MinMaxKeepsEveryValue) {
  const ActivationHistogram h = histogram_of(gaussian_with_outliers());
  EXPECT_FLOAT_EQ(h.max_abs(), 50.0);
  EXPECT_FALSE(h.non_negative());
  EXPECT_DOUBLE_EQ(calibrate_threshold(h, Calibrator::kMinMax, 127), 50.0);
}

TEST(Int8Calibrators, PercentileCutsTheRareTail) {
  std::vector<float> x(10000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1) / 10000.0f;  // (0, 1], uniform
  const ActivationHistogram h = histogram_of(x);
  EXPECT_TRUE(h.non_negative());
  const double width = h.bin_width();
  EXPECT_NEAR(calibrate_threshold(h, Calibrator::kPercentile, 255, 99.0), 0.99, 2 * width);
  EXPECT_NEAR(calibrate_threshold(h, Calibrator::kPercentile, 255, 50.0), 0.50, 2 * width);
  EXPECT_NEAR(calibrate_threshold(h, Calibrator::kPercentile, 255, 100.0), 1.0, 2 * width);
  // Ten outliers in 200,010 values lie above the 99.99th percentile of |x|.
  const double t = calibrate_threshold(histogram_of(gaussian_with_outliers()), Calibrator::kPercentile, 127, 99.99);
  EXPECT_GT(t, 3.0);
  EXPECT_LT(t, 5.0);
}

TEST(Int8Calibrators, EntropyIgnoresOutliersAndKeepsAFullRange) {
  // A Gaussian's information lies within a few sigma: the outliers at 50 are cut.
  const double t = calibrate_threshold(histogram_of(gaussian_with_outliers()), Calibrator::kEntropy, 127);
  EXPECT_GT(t, 2.0);
  EXPECT_LT(t, 10.0);
  // A uniform distribution has no tail to cut: the threshold stays near its edge.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> u(100000);
  for (float& v : u) v = dist(rng);
  EXPECT_GT(calibrate_threshold(histogram_of(u), Calibrator::kEntropy, 127), 0.9);
}

TEST(Int8Calibrators, ExactZerosDoNotPullTheEntropyThresholdDown) {
  // A ReLU's output: half exact zeros, half the positive side of N(0, 1).
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> relu(100000), positive;
  for (float& v : relu) {
    v = std::max(dist(rng), 0.0f);
    if (v > 0.0f) positive.push_back(v);
  }
  const double with_zeros = calibrate_threshold(histogram_of(relu), Calibrator::kEntropy, 255);
  EXPECT_DOUBLE_EQ(with_zeros, calibrate_threshold(histogram_of(positive), Calibrator::kEntropy, 255));
  EXPECT_GT(with_zeros, 3.0);
}

TEST(Int8Calibrators, AllZeroTensorsGetAUsableScale) {
  const ActivationHistogram h = histogram_of(std::vector<float>(100, 0.0f));
  for (Calibrator c : {Calibrator::kEntropy, Calibrator::kMinMax, Calibrator::kPercentile}) {
    EXPECT_GT(calibrate_threshold(h, c, 255), 0.0) << calibrator_name(c);
  }
}

TEST(Int8Calibrators, NamesRoundTrip) {
  for (Calibrator c : {Calibrator::kEntropy, Calibrator::kMinMax, Calibrator::kPercentile}) {
    EXPECT_EQ(calibrator_from_name(calibrator_name(c)), c);
  }
  EXPECT_FALSE(calibrator_from_name("kl").has_value());
}

}  // namespace
}  // namespace kiln::passes
