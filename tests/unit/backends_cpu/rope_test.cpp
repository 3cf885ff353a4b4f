#include "backends/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

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

// Rotate-half reference: angle float(pos) * inv_freq[j] in fp32 (as HF), the rest in double.
std::vector<double> rope_ref(const std::vector<float>& x, int64_t t, int64_t heads, int64_t hd,
                             int64_t rot, const std::vector<int32_t>& pos,
                             const std::vector<float>& inv) {
  std::vector<double> y(x.begin(), x.end());
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>((i * heads + h) * hd);
      for (int64_t j = 0; j < half; ++j) {
        const double a =
            static_cast<float>(pos[static_cast<size_t>(i)]) * inv[static_cast<size_t>(j)];
        const double x1 = x[base + j], x2 = x[base + j + half];
        y[base + j] = x1 * std::cos(a) - x2 * std::sin(a);
        y[base + j + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
  return y;
}

struct RopeCase {
  int64_t t, heads, head_dim, rotary_dim;
};

TEST(Rope, MatchesDoubleReference) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::uniform_int_distribution<int32_t> pos_dist(0, 131071);
  for (const RopeCase c : {RopeCase{7, 3, 64, 64}, RopeCase{83, 4, 80, 32},
                           RopeCase{5, 2, 128, 128}, RopeCase{769, 1, 128, 64}}) {
    std::vector<float> x(static_cast<size_t>(c.t * c.heads * c.head_dim));
    for (float& v : x) v = dist(rng);
    std::vector<int32_t> pos(static_cast<size_t>(c.t));
    for (auto& p : pos) p = pos_dist(rng);
    pos[0] = 0;
    const auto inv = rope_inv_freq(RopeParams{}, c.rotary_dim, 0);
    std::vector<float> y(x.size(), kNan);
    rope(x.data(), c.t, c.heads, c.head_dim, c.rotary_dim, pos.data(), inv.data(), y.data());
    const auto want = rope_ref(x, c.t, c.heads, c.head_dim, c.rotary_dim, pos, inv);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], want[i], 1e-6 * (1.0 + std::fabs(want[i]))) << "element " << i;
    }
    // Position 0 rotates by nothing; dimensions past rotary_dim pass through: both bit-exact.
    for (size_t d = 0; d < static_cast<size_t>(c.heads * c.head_dim); ++d) EXPECT_EQ(y[d], x[d]);
    for (int64_t i = 0; i < c.t; ++i) {
      for (int64_t h = 0; h < c.heads; ++h) {
        for (int64_t d = c.rotary_dim; d < c.head_dim; ++d) {
          const size_t k = static_cast<size_t>((i * c.heads + h) * c.head_dim + d);
          ASSERT_EQ(y[k], x[k]);
        }
      }
    }
    // In place gives the same bits.
    std::vector<float> z = x;
    rope(z.data(), c.t, c.heads, c.head_dim, c.rotary_dim, pos.data(), inv.data(), z.data());
    EXPECT_EQ(z, y);
  }
}

TEST(Rope, TableGivesTheBitsOfComputedAngles) {
  // The table is grown by the positions steps bring (out of order, past its size, by more than
  // double); every step's result equals rope() computing its own angles, in place or not.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (const RopeCase c : {RopeCase{0, 3, 64, 64}, RopeCase{0, 4, 80, 32}, RopeCase{0, 2, 128, 128}}) {
    const auto inv = rope_inv_freq(params("llama3"), c.rotary_dim, 0);
    RopeTable table(inv);
    EXPECT_EQ(table.positions(), 0);
    for (const std::vector<int32_t>& pos :
         {std::vector<int32_t>{3, 0, 1}, std::vector<int32_t>{2}, std::vector<int32_t>{40, 7, 300},
          std::vector<int32_t>{299, 5000, 4}}) {
      const auto t = static_cast<int64_t>(pos.size());
      std::vector<float> x(static_cast<size_t>(t * c.heads * c.head_dim));
      for (float& v : x) v = dist(rng);
      std::vector<float> want(x.size(), kNan), got(x.size(), kNan);
      rope(x.data(), t, c.heads, c.head_dim, c.rotary_dim, pos.data(), inv.data(), want.data());
      rope(x.data(), t, c.heads, c.head_dim, pos.data(), table, got.data());
      EXPECT_EQ(got, want);
      EXPECT_GT(table.positions(), *std::max_element(pos.begin(), pos.end()));
      rope(x.data(), t, c.heads, c.head_dim, pos.data(), table, x.data());
      EXPECT_EQ(x, want) << "in place";
    }
  }
}

TEST(Rope, RotationPreservesPairNorm) {
  // A rotation keeps |(x_j, x_{j+half})| for every pair, at any position.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t t = 9, heads = 2, hd = 64;
  std::vector<float> x(static_cast<size_t>(t * heads * hd));
  for (float& v : x) v = dist(rng);
  std::vector<int32_t> pos = {0, 1, 2, 100, 1000, 4095, 8191, 65535, 1 << 20};
  RopeParams p = params("llama3");
  p.theta = 500000.0;
  p.factor = 8.0;
  const auto inv = rope_inv_freq(p, hd, 0);
  std::vector<float> y(x.size(), kNan);
  rope(x.data(), t, heads, hd, hd, pos.data(), inv.data(), y.data());
  for (int64_t r = 0; r < t * heads; ++r) {
    for (int64_t j = 0; j < hd / 2; ++j) {
      const size_t a = static_cast<size_t>(r * hd + j), b = a + hd / 2;
      const double before = std::hypot(x[a], x[b]);
      const double after = std::hypot(y[a], y[b]);
      ASSERT_NEAR(after, before, 1e-6);
    }
  }
}

}  // namespace
}  // namespace kiln::cpu
