#include "backends/cpu/layers/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ir/position_encoding.h"

namespace kiln::cpu {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

ir::RopeParams params(std::string type) {
  ir::RopeParams p;
  p.type = std::move(type);
  return p;
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
    const auto inv = ir::rope_inv_freq(ir::RopeParams{}, c.rotary_dim, 0);
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
    const auto inv = ir::rope_inv_freq(params("llama3"), c.rotary_dim, 0);
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
  ir::RopeParams p = params("llama3");
  p.theta = 500000.0;
  p.factor = 8.0;
  const auto inv = ir::rope_inv_freq(p, hd, 0);
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
