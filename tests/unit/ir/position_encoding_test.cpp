#include "ir/position_encoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {
namespace {

// The formulas of transformers' modeling_rope_utils, evaluated in double.
std::vector<double> default_ref(double theta, int64_t dim) {
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (int64_t j = 0; j < dim / 2; ++j) {
    inv[static_cast<size_t>(j)] =
        1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(dim));
  }
  return inv;
}

void expect_rel_close(const std::vector<float>& got, const std::vector<double>& want, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rtol * std::fabs(want[i])) << "inv_freq[" << i << "]";
  }
}

RopeParams params(std::string type) {
  RopeParams p;
  p.type = std::move(type);
  return p;
}

TEST(RopeInvFreq, Default) {
  for (double theta : {10000.0, 500000.0, 1000000.0}) {
    for (int64_t dim : {32, 64, 80, 128}) {
      RopeParams p = params("default");
      p.theta = theta;
      const auto inv = rope_inv_freq(p, dim, 0);
      // The exponent 2j/dim is rounded to fp32 as in HF: ln(theta) * 6e-8 of relative error.
      expect_rel_close(inv, default_ref(theta, dim), 2e-6);
      EXPECT_EQ(inv[0], 1.0f);
    }
  }
}

TEST(RopeInvFreq, Linear) {
  RopeParams p = params("linear");
  p.factor = 4.0;
  const auto inv = rope_inv_freq(p, 128, 100000);
  auto want = default_ref(10000.0, 128);
  for (double& f : want) f /= 4.0;
  expect_rel_close(inv, want, 2e-6);
}

TEST(RopeInvFreq, Llama3SmoothsTheMiddleBand) {
  // Llama 3.1 8B: theta 500000, head_dim 128, factor 8, low 1, high 4, original context 8192.
  RopeParams p = params("llama3");
  p.theta = 500000.0;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position = 8192;
  const int64_t dim = 128;
  const auto inv = rope_inv_freq(p, dim, 0);
  const auto base = default_ref(p.theta, dim);
  const double low_wavelen = 8192.0 / 1.0, high_wavelen = 8192.0 / 4.0;
  std::vector<double> want(base.size());
  int kept = 0, divided = 0, smoothed = 0;
  for (size_t j = 0; j < base.size(); ++j) {
    const double wavelen = 2.0 * std::numbers::pi / base[j];
    if (wavelen < high_wavelen) {
      want[j] = base[j];
      ++kept;
    } else if (wavelen > low_wavelen) {
      want[j] = base[j] / 8.0;
      ++divided;
    } else {
      const double s = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want[j] = (1.0 - s) * base[j] / 8.0 + s * base[j];
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
  expect_rel_close(inv, want, 3e-6);
  // Outside the middle band the result is the default frequency, or exactly it divided by 8.
  RopeParams plain = p;
  plain.type = "default";
  const auto d = rope_inv_freq(plain, dim, 0);
  EXPECT_EQ(inv[0], d[0]);
  EXPECT_EQ(inv.back(), d.back() / 8.0f);
}

TEST(RopeInvFreq, DynamicNtk) {
  RopeParams p = params("dynamic");
  p.factor = 2.0;
  p.max_position = 2048;
  const int64_t dim = 64;
  RopeParams plain = p;
  plain.type = "default";
  const auto d = rope_inv_freq(plain, dim, 0);
  // At or below max_position: the default frequencies, bit for bit.
  EXPECT_EQ(rope_inv_freq(p, dim, 1), d);
  EXPECT_EQ(rope_inv_freq(p, dim, 2048), d);
  for (int64_t seq_len : {2049, 3000, 8192, 100000}) {
    const double base = 10000.0 * std::pow(2.0 * seq_len / 2048.0 - 1.0, 64.0 / 62.0);
    const auto inv = rope_inv_freq(p, dim, seq_len);
    expect_rel_close(inv, default_ref(base, dim), 3e-6);
    // A grown base lowers every frequency but the first.
    for (size_t j = 1; j < inv.size(); ++j) EXPECT_LT(inv[j], d[j]);
  }
}

TEST(RopeInvFreq, Validation) {
  EXPECT_TRUE(rope_params_validate(params("default"), 128).is_ok());
  EXPECT_TRUE(rope_params_validate(params("llama3"), 128).is_ok());
  EXPECT_FALSE(rope_params_validate(params("default"), 127).is_ok());
  EXPECT_FALSE(rope_params_validate(params("default"), 0).is_ok());
  const Status yarn = rope_params_validate(params("yarn"), 128);
  EXPECT_EQ(yarn.code(), StatusCode::kUnimplemented);
  EXPECT_NE(yarn.message().find("yarn"), std::string::npos);
  RopeParams bad = params("llama3");
  bad.high_freq_factor = bad.low_freq_factor;
  EXPECT_FALSE(rope_params_validate(bad, 128).is_ok());
  bad = params("linear");
  bad.factor = 0.0;
  EXPECT_FALSE(rope_params_validate(bad, 128).is_ok());
  bad = params("dynamic");
  bad.max_position = 0;
  EXPECT_FALSE(rope_params_validate(bad, 128).is_ok());
  bad = params("default");
  bad.theta = -1.0;
  EXPECT_FALSE(rope_params_validate(bad, 128).is_ok());
}

TEST(RopeParams, ReadsTheNodeAttributes) {
  Node node;
  node.op = "rope";
  node.name = "rq";
  // Absent attributes take the struct's defaults, except the two positions, which read 0.
  RopeParams p = rope_params(node);
  EXPECT_EQ(p.theta, 10000.0);
  EXPECT_EQ(p.type, "default");
  EXPECT_EQ(p.factor, 1.0);
  EXPECT_EQ(p.low_freq_factor, 1.0);
  EXPECT_EQ(p.high_freq_factor, 4.0);
  EXPECT_EQ(p.original_max_position, 0);
  EXPECT_EQ(p.max_position, 0);
  node.attrs = {{"theta", 500000.0},
                {"type", std::string("llama3")},
                {"factor", 8.0},
                {"low_freq_factor", 1.5},
                {"high_freq_factor", 3.0},
                {"original_max_position", int64_t{8192}},
                {"max_position", int64_t{4096}}};
  p = rope_params(node);
  EXPECT_EQ(p.theta, 500000.0);
  EXPECT_EQ(p.type, "llama3");
  EXPECT_EQ(p.factor, 8.0);
  EXPECT_EQ(p.low_freq_factor, 1.5);
  EXPECT_EQ(p.high_freq_factor, 3.0);
  EXPECT_EQ(p.original_max_position, 8192);
  EXPECT_EQ(p.max_position, 4096);
}

TEST(AlibiSlopes, MatchTheBaichuanFormula) {
  // Powers of two: 2^(-8/n), 2^(-16/n), ...; n = 8 gives 1/2, 1/4, ..., 1/256 exactly.
  const auto eight = alibi_slopes(8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(eight[static_cast<size_t>(i)], std::ldexp(1.0f, -(i + 1)));
  for (int64_t n = 1; n <= 40; ++n) {
    SCOPED_TRACE("heads " + std::to_string(n));
    const auto slopes = alibi_slopes(n);
    ASSERT_EQ(static_cast<int64_t>(slopes.size()), n);
    int64_t c = 1;
    while (c * 2 <= n) c *= 2;
    for (int64_t i = 0; i < n; ++i) {
      // The first c heads: 2^(-8 (i+1) / c). The rest: heads 1, 3, 5, ... of 2c.
      const auto fc = static_cast<double>(c);
      const double want = i < c ? std::exp2(-8.0 * static_cast<double>(i + 1) / fc)
                                : std::exp2(-8.0 * static_cast<double>(2 * (i - c) + 1) / (2 * fc));
      EXPECT_NEAR(slopes[static_cast<size_t>(i)], want, 1e-6 * want) << "head " << i;
    }
    std::vector<float> sorted = slopes;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "slopes repeat";
  }
}

}  // namespace
}  // namespace kiln::ir
