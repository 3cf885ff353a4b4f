// Sampler, SamplingParams and logprobs: distributions checked by chi-square goodness of fit
// against a plain double-precision reference of the transformers logits-warper rules, plus the
// edge cases (greedy ties, non-finite logits, penalties, seeds) with exact expectations.
// Every random draw uses a fixed seed, so each test's outcome is fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "llm/generation/logprobs.h"
#include "llm/generation/sampler.h"
#include "llm/generation/sampling_params.h"
#include "support/sampling_reference.h"

namespace kiln::llm {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kDraws = 20000;
// Well-behaved samplers fail a test at this level with probability 1e-3; as the seeds are fixed,
// a pass is a fixed outcome, not a coin toss.
constexpr double kMinPValue = 1e-3;

// Eight logits with no ties and clear gaps between cumulative probabilities:
// softmax at T=1 ~ [0.072 0.195 0.044 0.010 0.531 0.026 0.119 0.004].
const std::vector<float>& kLogits = kiln::testing::kSweepLogits;

// Regularised upper incomplete gamma Q(a, x): series below a + 1, Lentz continued fraction above.
double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 10000 && term > sum * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

// p-value of Pearson's chi-square test of `counts` against `probs`. Cells expected to hold fewer
// than 5 draws are pooled into one cell, as the test's approximation requires.
double chi_square_p_value(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  std::vector<std::pair<double, double>> cells;  // (observed, expected)
  double pooled_observed = 0.0;
  double pooled_expected = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * n;
    if (probs[i] == 0.0) continue;  // callers assert those counts are zero
    if (expected < 5.0) {
      pooled_observed += static_cast<double>(counts[i]);
      pooled_expected += expected;
    } else {
      cells.emplace_back(static_cast<double>(counts[i]), expected);
    }
  }
  if (pooled_expected > 0.0) cells.emplace_back(pooled_observed, pooled_expected);
  double statistic = 0.0;
  for (const auto& [observed, expected] : cells) statistic += (observed - expected) * (observed - expected) / expected;
  const double degrees_of_freedom = static_cast<double>(cells.size()) - 1.0;
  return gamma_q(degrees_of_freedom / 2.0, statistic / 2.0);
}

using kiln::testing::reference_probs;

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

std::vector<int64_t> draw_counts(const SamplingParams& params, const std::vector<float>& logits, int draws = kDraws) {
  Sampler sampler(params, {});
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    Expected<Sampler::Choice> choice = sampler.sample(logits);
    EXPECT_TRUE(choice.has_value()) << choice.status().message();
    if (!choice) break;
    ++counts[static_cast<size_t>(choice->token)];
  }
  return counts;
}

std::vector<int32_t> draw_sequence(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < draws; ++i) tokens.push_back(sampler.sample(logits)->token);
  return tokens;
}

void expect_zero_where_impossible(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
    }
  }
}

TEST(ChiSquareHelper, MatchesTabulatedCriticalValues) {
  // Chi-square critical values: df 7 at 0.05 is 14.067, df 2 at 0.001 is 13.816.
  EXPECT_NEAR(gamma_q(3.5, 14.067 / 2), 0.05, 1e-4);
  EXPECT_NEAR(gamma_q(1.0, 13.816 / 2), 0.001, 1e-5);
  EXPECT_NEAR(gamma_q(3.5, 2.0 / 2), 0.9598, 1e-4);  // series branch
}

TEST(SamplerDistribution, TemperatureOneMatchesSoftmax) {
  const std::vector<int64_t> counts = draw_counts(seeded(1), kLogits);
  EXPECT_GT(chi_square_p_value(counts, reference_probs(kLogits, 1.0)), kMinPValue);
  // The same test has the power to reject a nearby wrong distribution.
  EXPECT_LT(chi_square_p_value(counts, reference_probs(kLogits, 1.2)), 1e-6);
}

TEST(SamplerDistribution, TemperatureHalfSharpens) {
  SamplingParams p = seeded(2);
  p.temperature = 0.5f;
  const std::vector<int64_t> counts = draw_counts(p, kLogits);
  EXPECT_GT(chi_square_p_value(counts, reference_probs(kLogits, 0.5)), kMinPValue);
  EXPECT_LT(chi_square_p_value(counts, reference_probs(kLogits, 1.0)), 1e-6);
}

TEST(SamplerDistribution, TopKRenormalisesOverTheTopThree) {
  SamplingParams p = seeded(3);
  p.top_k = 3;
  const std::vector<int64_t> counts = draw_counts(p, kLogits);
  const std::vector<double> probs = reference_probs(kLogits, 1.0, 3);
  ASSERT_EQ(std::count_if(probs.begin(), probs.end(), [](double v) { return v > 0.0; }), 3);
  expect_zero_where_impossible(counts, probs);
  EXPECT_GT(chi_square_p_value(counts, probs), kMinPValue);
}

TEST(SamplerDistribution, TopPKeepsSmallestSetReachingP) {
  // Sorted probabilities 0.531, 0.195, 0.119, ...: cumulative 0.726 < 0.8 <= 0.845, so the token
  // that crosses 0.8 (id 6) is kept and the nucleus is {4, 1, 6}.
  SamplingParams p = seeded(4);
  p.top_p = 0.8f;
  const std::vector<int64_t> counts = draw_counts(p, kLogits);
  const std::vector<double> probs = reference_probs(kLogits, 1.0, 0, 0.8);
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_EQ(probs[i] > 0.0, i == 4 || i == 1 || i == 6) << i;
  expect_zero_where_impossible(counts, probs);
  EXPECT_GT(counts[6], 0);
  EXPECT_GT(chi_square_p_value(counts, probs), kMinPValue);
}

TEST(SamplerDistribution, MinPDropsTokensBelowFractionOfTop) {
  // min_p 0.1 of 0.531 is 0.053: token 0 (0.072) stays, token 2 (0.044) goes.
  SamplingParams p = seeded(5);
  p.min_p = 0.1f;
  const std::vector<int64_t> counts = draw_counts(p, kLogits);
  const std::vector<double> probs = reference_probs(kLogits, 1.0, 0, 1.0, 0.1);
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_EQ(probs[i] > 0.0, i == 4 || i == 1 || i == 6 || i == 0) << i;
  expect_zero_where_impossible(counts, probs);
  EXPECT_GT(chi_square_p_value(counts, probs), kMinPValue);
}

TEST(SamplerDistribution, AllKnobsTogetherFollowTheDocumentedOrder) {
  const std::vector<float> logits = {0.3f, 2.2f, 1.9f, -0.4f, 2.5f, 1.0f, 1.6f, 0.8f, 2.0f, -1.5f, 1.2f, 0.1f};
  SamplingParams p = seeded(6);
  p.temperature = 0.7f;
  p.top_k = 7;
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  const std::vector<int64_t> counts = draw_counts(p, logits);
  const std::vector<double> probs = reference_probs(logits, 0.7, 7, 0.9, 0.1);
  expect_zero_where_impossible(counts, probs);
  EXPECT_GT(chi_square_p_value(counts, probs), kMinPValue);
}

TEST(SamplerDistribution, AllLogitsEqualIsUniform) {
  const std::vector<float> logits(8, 0.25f);
  const std::vector<int64_t> counts = draw_counts(seeded(7), logits);
  EXPECT_GT(chi_square_p_value(counts, std::vector<double>(8, 1.0 / 8)), kMinPValue);
}

TEST(SamplerTopP, LargeNucleusIsExactWithTiesInIdOrder) {
  // 600 tokens at logit 0, 600 at -10. The tie block holds 600 of 600.027 of the mass, so top_p
  // 0.5 needs 301 of the tied tokens (300 fall short of 300.014), taken in id order: 0..300.
  std::vector<float> logits(1200, -10.0f);
  std::fill(logits.begin(), logits.begin() + 600, 0.0f);
  SamplingParams p = seeded(8);
  p.top_p = 0.5f;
  const std::vector<int64_t> counts = draw_counts(p, logits);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[300], 0);  // about 66 draws each
  for (size_t i = 301; i < counts.size(); ++i) ASSERT_EQ(counts[i], 0) << "token " << i;
}

TEST(SamplerTopP, OneKeepsTheLeastLikelyToken) {
  SamplingParams p = seeded(9);
  p.top_p = 1.0f;
  const std::vector<int64_t> counts = draw_counts(p, kLogits);
  EXPECT_GT(counts[7], 0);  // probability 0.0036: about 72 of 20000
  EXPECT_GT(chi_square_p_value(counts, reference_probs(kLogits, 1.0)), kMinPValue);
}

TEST(SamplerTopK, LargerThanVocabIsOff) {
  SamplingParams off = seeded(10);
  SamplingParams huge = seeded(10);
  huge.top_k = 1000;
  Sampler a(off, {});
  Sampler b(huge, {});
  EXPECT_EQ(draw_sequence(a, kLogits, 500), draw_sequence(b, kLogits, 500));
  SamplingParams vocab_minus_one = seeded(10);
  vocab_minus_one.top_k = 7;
  const std::vector<int64_t> counts = draw_counts(vocab_minus_one, kLogits);
  EXPECT_EQ(counts[7], 0);  // the least likely token is the one cut
}

TEST(SamplerTopK, LargeKPartitionsTheWholeRow) {
  // k above the heap limit takes the partitioning path: tokens 0..1999 stay, 2000.. never appear.
  std::vector<float> logits(3000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = -0.001f * static_cast<float>(i);
  SamplingParams p = seeded(19);
  p.top_k = 2000;
  const std::vector<int64_t> counts = draw_counts(p, logits, 4000);
  for (size_t i = 2000; i < counts.size(); ++i) ASSERT_EQ(counts[i], 0) << "token " << i;
  EXPECT_GT(std::accumulate(counts.begin() + 1900, counts.begin() + 2000, int64_t{0}), 0);
}

TEST(SamplerTopK, TiesGoToLowerIds) {
  const std::vector<float> logits = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  SamplingParams p = seeded(11);
  p.top_k = 2;
  const std::vector<int64_t> counts = draw_counts(p, logits, 2000);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_EQ(counts[3], 0);
  EXPECT_EQ(counts[0] + counts[4], 0);
}

TEST(SamplerGreedy, ArgmaxWithTiesToLowestId) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler sampler(p, {});
  EXPECT_EQ(sampler.sample(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f})->token, 1);
  EXPECT_EQ(sampler.sample(std::vector<float>(5, -7.0f))->token, 0);
  EXPECT_EQ(sampler.sample(std::vector<float>{kNaN, -1.0f, kNaN, -0.5f})->token, 3);
  EXPECT_EQ(sampler.sample(std::vector<float>{-kInf, -kInf, -3e38f})->token, 2);
}

TEST(SamplerGreedy, TinyTemperatureActsLikeArgmax) {
  SamplingParams p = seeded(12);
  p.temperature = 1e-38f;  // 1/T overflows to inf
  const std::vector<float> logits = {1.0f, 2.0f, 1.999f};
  const std::vector<int64_t> counts = draw_counts(p, logits, 200);
  EXPECT_EQ(counts[1], 200);
}

TEST(SamplerNonFinite, NegativeInfinityIsNeverDrawn) {
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 0.5f, -kInf};
  SamplingParams p = seeded(13);
  p.top_k = 4;  // wider than the finite set
  const std::vector<int64_t> counts = draw_counts(p, logits, 5000);
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
}

TEST(SamplerNonFinite, NaNCountsAsNegativeInfinity) {
  const std::vector<float> logits = {kNaN, 1.0f, kNaN, 1.0f};
  const std::vector<int64_t> counts = draw_counts(seeded(14), logits, 4000);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(chi_square_p_value({counts[1], counts[3]}, {0.5, 0.5}), kMinPValue);
}

TEST(SamplerNonFinite, PositiveInfinityTokensShareTheMass) {
  const std::vector<float> logits = {5.0f, kInf, 100.0f, kInf};
  const std::vector<int64_t> counts = draw_counts(seeded(15), logits, 4000);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(chi_square_p_value({counts[1], counts[3]}, {0.5, 0.5}), kMinPValue);
}

TEST(SamplerNonFinite, NoFiniteLogitIsAnError) {
  Sampler sampler(seeded(16), {});
  for (const std::vector<float>& logits :
       {std::vector<float>{kNaN, kNaN}, std::vector<float>{-kInf, kNaN, -kInf}, std::vector<float>{}}) {
    Expected<Sampler::Choice> choice = sampler.sample(logits);
    ASSERT_FALSE(choice.has_value());
    EXPECT_EQ(choice.status().code(), StatusCode::kInvalidArgument);
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Sampler greedy_sampler(greedy, {});
  EXPECT_FALSE(greedy_sampler.sample(std::vector<float>{kNaN, -kInf}).has_value());
}

TEST(SamplerLogitBias, ForcesAndBansTokens) {
  SamplingParams force = seeded(17);
  force.logit_bias = {{7, 100.0f}};  // the least likely token
  const std::vector<int64_t> counts = draw_counts(force, kLogits, 1000);
  EXPECT_EQ(counts[7], 1000);

  SamplingParams ban;
  ban.temperature = 0.0f;
  ban.logit_bias = {{4, -100.0f}};
  Sampler sampler(ban, {});
  EXPECT_EQ(sampler.sample(kLogits)->token, 1);  // the runner-up
}

TEST(SamplerPenalties, RepetitionPenaltyExactValues) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 1, 0, 99};  // 99 lies outside the row and is ignored
  Sampler sampler(p, prompt);
  sampler.accept(2);
  sampler.accept(2);
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
  sampler.apply_bias_and_penalties(logits);
  // Positive logits are divided, negative multiplied, each distinct token once.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 0.5f, 0.5f, 0.0f}));
}

TEST(SamplerPenalties, FrequencyAndPresenceExactValues) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {3};  // prompt tokens are not penalised by these two
  Sampler sampler(p, prompt);
  for (int32_t token : {1, 1, 1, 2}) sampler.accept(token);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  sampler.apply_bias_and_penalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.0f - 1.5f - 0.25f, 1.0f - 0.5f - 0.25f, 1.0f}));
}

TEST(SamplerPenalties, BiasComesBeforeRepetitionPenalty) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{0, 1.0f}};
  const std::vector<int32_t> prompt = {0};
  Sampler sampler(p, prompt);
  std::vector<float> logits = {1.0f};
  sampler.apply_bias_and_penalties(logits);
  EXPECT_EQ(logits[0], 1.0f);  // (1 + 1) / 2, not 1 / 2 + 1
}

TEST(SamplerPenalties, GreedyChoiceMovesAwayFromRepeatedToken) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.frequency_penalty = 1.0f;
  Sampler sampler(p, {});
  const std::vector<float> logits = {0.0f, 2.5f, 1.0f, 2.0f};
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4; ++i) {
    tokens.push_back(sampler.sample(logits)->token);
    sampler.accept(tokens.back());
  }
  // 1 (2.5), then 3 (2.0 > 1.5), then 1 (1.5 > 1.0), then 2 (1.0, tied with 3 -> lower id).
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 3, 1, 2}));
}

TEST(SamplerSeed, SameSeedSameTokensDifferentSeedsDiffer) {
  Sampler a(seeded(42), {});
  Sampler b(seeded(42), {});
  Sampler c(seeded(43), {});
  const std::vector<int32_t> first = draw_sequence(a, kLogits, 300);
  EXPECT_EQ(first, draw_sequence(b, kLogits, 300));
  EXPECT_NE(first, draw_sequence(c, kLogits, 300));
  Sampler unseeded_a(SamplingParams{}, {});
  Sampler unseeded_b(SamplingParams{}, {});
  EXPECT_NE(draw_sequence(unseeded_a, kLogits, 300), draw_sequence(unseeded_b, kLogits, 300));
}

TEST(SamplerSeed, InterleavedSamplersMatchEachAlone) {
  const std::vector<float> other_logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  SamplingParams pa = seeded(100);
  SamplingParams pb = seeded(200);
  pb.top_p = 0.9f;
  pb.presence_penalty = 0.5f;
  auto run = [&](Sampler& s, const std::vector<float>& logits) {
    const int32_t token = s.sample(logits)->token;
    s.accept(token);
    return token;
  };
  Sampler alone_a(pa, {});
  Sampler alone_b(pb, {});
  std::vector<int32_t> expect_a;
  std::vector<int32_t> expect_b;
  for (int i = 0; i < 200; ++i) expect_a.push_back(run(alone_a, kLogits));
  for (int i = 0; i < 200; ++i) expect_b.push_back(run(alone_b, other_logits));

  Sampler a(pa, {});
  Sampler b(pb, {});
  std::vector<int32_t> got_a;
  std::vector<int32_t> got_b;
  for (int i = 0; i < 200; ++i) {
    got_b.push_back(run(b, other_logits));
    got_a.push_back(run(a, kLogits));
  }
  EXPECT_EQ(got_a, expect_a);
  EXPECT_EQ(got_b, expect_b);
}

TEST(SamplerLogprobs, RawLogSoftmaxWhateverTheKnobs) {
  SamplingParams p = seeded(18);
  p.temperature = 0.3f;
  p.logit_bias = {{7, 100.0f}};  // forces token 7; its logprob is still the model's
  p.logprobs = 3;
  Sampler sampler(p, {});
  Expected<Sampler::Choice> choice = sampler.sample(kLogits);
  ASSERT_TRUE(choice.has_value());
  const std::vector<double> probs = reference_probs(kLogits, 1.0);
  EXPECT_EQ(choice->token, 7);
  ASSERT_TRUE(choice->logprob.has_value());
  EXPECT_NEAR(*choice->logprob, std::log(probs[7]), 1e-5);
  ASSERT_EQ(choice->top.size(), 3u);
  const int32_t expected_ids[] = {4, 1, 6};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(choice->top[i].token, expected_ids[i]);
    EXPECT_NEAR(choice->top[i].logprob, std::log(probs[static_cast<size_t>(expected_ids[i])]), 1e-5);
  }
}

TEST(SamplerLogprobs, CountsZeroAndNone) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 0;
  Sampler with(p, {});
  Expected<Sampler::Choice> choice = with.sample(kLogits);
  EXPECT_TRUE(choice->logprob.has_value());
  EXPECT_TRUE(choice->top.empty());
  p.logprobs = -1;
  Sampler without(p, {});
  choice = without.sample(kLogits);
  EXPECT_FALSE(choice->logprob.has_value());
  EXPECT_TRUE(choice->top.empty());
}

TEST(Logprobs, TiesInIdOrderAndNonFiniteRows) {
  const std::vector<float> logits = {0.0f, 1.0f, kNaN, 1.0f, 1.0f};
  const LogSoftmaxNorm norm = log_softmax_norm(logits);
  const std::vector<TokenLogprob> top = top_logprobs(logits, norm, 4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 4);
  EXPECT_EQ(top[3].token, 0);
  const double log_z = std::log(1.0 + 3.0 * std::exp(1.0));
  EXPECT_NEAR(top[0].logprob, 1.0 - log_z, 1e-6);
  EXPECT_NEAR(top[3].logprob, -log_z, 1e-6);
  EXPECT_EQ(logprob_of(logits, norm, 2), -kInf);
  EXPECT_EQ(top_logprobs(logits, norm, 50).size(), logits.size());

  const std::vector<float> infinite = {kInf, 0.0f, kInf};
  const LogSoftmaxNorm inf_norm = log_softmax_norm(infinite);
  EXPECT_NEAR(logprob_of(infinite, inf_norm, 0), std::log(0.5), 1e-6);
  EXPECT_EQ(logprob_of(infinite, inf_norm, 1), -kInf);

  // A large vocabulary with values far from zero keeps full precision.
  std::vector<float> wide(151936);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = 80.0f + static_cast<float>(i % 97) * 0.01f;
  const LogSoftmaxNorm wide_norm = log_softmax_norm(wide);
  double total = 0.0;
  for (size_t i = 0; i < wide.size(); ++i) total += std::exp(logprob_of(wide, wide_norm, static_cast<int32_t>(i)));
  EXPECT_NEAR(total, 1.0, 1e-3);
}

TEST(SamplingParamsValidate, DefaultsAreValid) { EXPECT_TRUE(validate(SamplingParams{}, 100).is_ok()); }

TEST(SamplingParamsValidate, EachBadFieldIsNamed) {
  struct Case {
    const char* field;
    void (*set)(SamplingParams&);
  };
  const Case cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kNaN; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -1; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.5f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.5f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -3.0f; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }},
      {"logit_bias[3]", [](SamplingParams& p) { p.logit_bias = {{3, 101.0f}}; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }},
      {"stop[1]", [](SamplingParams& p) { p.stop = {"ok", ""}; }},
      {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {5, 100}; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -2; }},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    const Status status = validate(p, 100);
    ASSERT_FALSE(status.is_ok()) << c.field;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message().rfind(c.field, 0), 0u) << status.message();
  }
}

TEST(GenerationDefaults, ReadsSamplingValuesAndEos) {
  Expected<GenerationDefaults> d = generation_defaults_from_json(
      R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128009],
          "temperature": 0.6, "top_p": 0.9, "top_k": 40, "repetition_penalty": 1.1,
          "max_new_tokens": 256, "transformers_version": "4.40.0"})");
  ASSERT_TRUE(d.has_value()) << d.status().message();
  EXPECT_FLOAT_EQ(d->params.temperature, 0.6f);
  EXPECT_FLOAT_EQ(d->params.top_p, 0.9f);
  EXPECT_EQ(d->params.top_k, 40);
  EXPECT_FLOAT_EQ(d->params.repetition_penalty, 1.1f);
  EXPECT_EQ(d->params.max_tokens, 256);
  EXPECT_EQ(d->eos_token_ids, (std::vector<int32_t>{128001, 128009}));
  EXPECT_TRUE(validate(d->params, 128256).is_ok());
}

TEST(GenerationDefaults, SingleEosNullsAndGreedy) {
  Expected<GenerationDefaults> d = generation_defaults_from_json(R"({"eos_token_id": 2, "top_p": null})");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(d->params.top_p, 1.0f);
  EXPECT_EQ(d->params.temperature, 1.0f);

  d = generation_defaults_from_json(R"({"do_sample": false, "temperature": 0.7})");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->params.temperature, 0.0f);
  EXPECT_TRUE(generation_defaults_from_json("{}")->eos_token_ids.empty());
}

TEST(GenerationDefaults, BadFilesNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"{not json", "not valid JSON"},
      {"[1, 2]", "JSON object"},
      {R"({"temperature": "hot"})", "\"temperature\""},
      {R"({"top_k": 4.5})", "\"top_k\""},
      {R"({"eos_token_id": [1, "x"]})", "\"eos_token_id\""},
      {R"({"eos_token_id": -3})", "\"eos_token_id\""},
      {R"({"do_sample": 1})", "\"do_sample\""},
  };
  for (const auto& [json, needle] : cases) {
    Expected<GenerationDefaults> d = generation_defaults_from_json(json);
    ASSERT_FALSE(d.has_value()) << json;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find(needle), std::string::npos) << d.status().message();
  }
}

}  // namespace
}  // namespace kiln::llm
