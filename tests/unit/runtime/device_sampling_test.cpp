// Device sampling's host reference (runtime::sample_row), the algorithm a GPU backend's kernel
// reproduces. The draw is an inverse-CDF walk, so sweeping the uniform draw over N evenly spaced
// points must give each token N times its probability, to within a draw or two: these tests
// check the kept sets and the distribution against the double-precision transformers rules,
// with no randomness at all.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "runtime/device_sampling.h"
#include "support/sampling_reference.h"

namespace kiln::runtime {
namespace {

using kiln::testing::expect_counts_match;
using kiln::testing::kSweepLogits;
using kiln::testing::one_row;
using kiln::testing::reference_probs;
using kiln::testing::sweep_counts;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const std::vector<float>& kLogits = kSweepLogits;

TEST(DeviceSamplingExp, IsOneAtZeroAndWithinTwoUlpDownToTheCutOff) {
  EXPECT_EQ(device_sampling_exp(0.0f), 1.0f);
  EXPECT_EQ(device_sampling_exp(-0.0f), 1.0f);
  EXPECT_EQ(device_sampling_exp(-87.5f), 0.0f);
  EXPECT_EQ(device_sampling_exp(-kInf), 0.0f);
  EXPECT_EQ(device_sampling_exp(kNaN), 0.0f);
  double worst = 0.0;
  for (float x = -87.0f; x <= 0.0f; x += 0.00137f) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(device_sampling_exp(x) - exact) / exact);
  }
  EXPECT_LT(worst, 2.5e-7);  // 2 ulp of a float is 2.4e-7 relative at worst
}

TEST(DeviceSamplingExp, MassesAreExactFixedPoint) {
  EXPECT_EQ(device_sampling_mass(1.0f), uint64_t{1} << 44);
  EXPECT_EQ(device_sampling_mass(0.5f), uint64_t{1} << 43);
  EXPECT_EQ(device_sampling_mass(0x1p-45f), 0u);
  EXPECT_LT(device_sampling_key(-kInf), device_sampling_key(-1.0f));
  EXPECT_LT(device_sampling_key(-1.0f), device_sampling_key(-0.0f));
  EXPECT_LT(device_sampling_key(0.0f), device_sampling_key(1e-30f));
  EXPECT_LT(device_sampling_key(2.0f), device_sampling_key(kInf));
}

TEST(DeviceSampling, GreedyIsTheFirstLargestLogit) {
  std::vector<float> row = {1.0f, 3.0f, kNaN, 3.0f, -kInf};
  EXPECT_EQ(sample_row(row, one_row(0.0f), 0), 1);
}

TEST(DeviceSampling, DrawsFollowTheTransformersRules) {
  const struct {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  } cases[] = {
      {1.0f, 0, 1.0f, 0.0f},  {0.5f, 0, 1.0f, 0.0f},   {2.0f, 0, 1.0f, 0.0f},  {1.0f, 3, 1.0f, 0.0f},
      {1.0f, 0, 0.8f, 0.0f},  {1.0f, 0, 1.0f, 0.1f},   {0.7f, 5, 0.9f, 0.05f}, {1.3f, 6, 0.5f, 0.0f},
      {1.0f, 1, 1.0f, 0.0f},  {1.0f, 100, 1.0f, 0.0f},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.temperature << " top_k=" << c.top_k << " top_p=" << c.top_p
                                      << " min_p=" << c.min_p);
    expect_counts_match(sweep_counts(kLogits, one_row(c.temperature, c.top_k, c.top_p, c.min_p)),
                        reference_probs(kLogits, c.temperature, c.top_k, c.top_p, c.min_p));
  }
}

TEST(DeviceSampling, DrawsFollowTheRulesOverAThousandTokens) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(1000);
  for (float& v : logits) v = normal(rng);
  constexpr int kDraws = 10000;  // a tenth of the sweep: rows ten times longer
  expect_counts_match(sweep_counts(logits, one_row(1.0f), kDraws), reference_probs(logits, 1.0), kDraws);
  expect_counts_match(sweep_counts(logits, one_row(0.8f, 50, 0.9f), kDraws), reference_probs(logits, 0.8, 50, 0.9),
                      kDraws);
  expect_counts_match(sweep_counts(logits, one_row(1.0f, 0, 0.95f, 0.02f), kDraws),
                      reference_probs(logits, 1.0, 0, 0.95, 0.02), kDraws);
}

TEST(DeviceSampling, TiesGoToLowerIds) {
  // top-k 2 of {1, 2, 2, 2, 0}: two of the three tied 2s, the lower ids.
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  expect_counts_match(sweep_counts(logits, one_row(1.0f, 2)), {0.0, 0.5, 0.5, 0.0, 0.0});
  // top-p 0.5 of four equal tokens: the first two reach it.
  const std::vector<float> flat(4, 0.0f);
  expect_counts_match(sweep_counts(flat, one_row(1.0f, 0, 0.5f)), {0.5, 0.5, 0.0, 0.0});
}

TEST(DeviceSampling, NonFiniteLogits) {
  // Tokens at +inf share all the probability; NaN is never drawn.
  const std::vector<float> logits = {1.0f, kInf, kNaN, kInf, 0.0f};
  expect_counts_match(sweep_counts(logits, one_row(1.0f)), {0.0, 0.5, 0.0, 0.5, 0.0});
  std::vector<float> none = {kNaN, -kInf, kNaN};
  EXPECT_EQ(sample_row(none, one_row(1.0f), 0), -1);
  none = {kNaN, -kInf, kNaN};
  EXPECT_EQ(sample_row(none, one_row(0.0f), 0), -1);
}

TEST(DeviceSampling, AMaskKeepsOnlyItsTokens) {
  // Tokens 1 and 4 allowed: the draw splits between them as their own probabilities say.
  SamplingBatch batch = one_row(1.0f);
  const std::vector<uint64_t> mask = {(1u << 1) | (1u << 4)};
  batch.set_mask(batch.rows[0], mask);
  const std::vector<float> logits = {3.0f, 1.0f, 2.0f, 5.0f, 1.0f};
  expect_counts_match(sweep_counts(logits, batch), {0.0, 0.5, 0.0, 0.0, 0.5});
  // Greedy: the first largest allowed logit, not the row's largest.
  SamplingBatch greedy = one_row(0.0f);
  greedy.set_mask(greedy.rows[0], mask);
  std::vector<float> row = logits;
  EXPECT_EQ(sample_row(row, greedy, 0), 1);
  // Nothing allowed, or only tokens beyond the row: no token.
  SamplingBatch none = one_row(0.0f);
  none.set_mask(none.rows[0], std::vector<uint64_t>{0});
  row = logits;
  EXPECT_EQ(sample_row(row, none, 0), -1);
  // A mask shorter than the vocabulary allows nothing past its words.
  std::vector<float> wide(130, 0.0f);
  wide[129] = 9.0f;
  SamplingBatch short_mask = one_row(0.0f);
  short_mask.set_mask(short_mask.rows[0], std::vector<uint64_t>{~uint64_t{0}, ~uint64_t{0}});
  EXPECT_EQ(sample_row(wide, short_mask, 0), 0);
  // A row without a mask beside a masked one is unmasked.
  SamplingBatch two = one_row(0.0f);
  two.set_mask(two.rows[0], mask);
  two.add_row();
  row = logits;
  EXPECT_EQ(sample_row(row, two, 1), 3);
  EXPECT_TRUE(validate(two, 2));
  two.rows[1].mask_begin = 1;  // past the batch's one word
  EXPECT_FALSE(validate(two, 2));
}

TEST(DeviceSampling, ValidateNamesTheRowAndField) {
  SamplingBatch batch = one_row(1.0f);
  batch.add_row().top_p = 0.0f;
  Status st = validate(batch, 2);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("sampling row 1: top_p"), std::string::npos) << st.message();
  batch.rows[1].top_p = 1.0f;
  batch.rows[1].bias_count = 1;
  st = validate(batch, 2);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("list range"), std::string::npos) << st.message();
  batch.rows[1].bias_count = 0;
  batch.rows[0].temperature = -1.0f;
  EXPECT_FALSE(validate(batch, 2));
  batch.rows[0].temperature = 1.0f;
  EXPECT_TRUE(validate(batch, 2));
  EXPECT_FALSE(validate(batch, 3));
}

}  // namespace
}  // namespace kiln::runtime
