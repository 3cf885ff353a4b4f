// Sampler's rows for device sampling (runtime/device_sampling.h): the same bias and
// penalties as Sampler::sample applies, and the sequence's own seeded draws, one a row.
#include <gtest/gtest.h>

#include <vector>

#include "llm/generation/sampler.h"
#include "llm/generation/token_order.h"
#include "runtime/device_sampling.h"
#include "support/sampling_reference.h"

namespace kiln::llm {
namespace {

using kiln::testing::expect_counts_match;
using kiln::testing::kSweepLogits;
using kiln::testing::reference_probs;
using kiln::testing::sweep_counts;

// The Sampler's row for a request with every adjustment, after some generated tokens.
struct AdjustedRequest {
  SamplingParams params;
  std::vector<int32_t> prompt = {1, 4, 4, 7};
  std::vector<int32_t> generated = {4, 6, 6, 300};  // 300 lies outside the row: ignored
  AdjustedRequest() {
    params.temperature = 0.8f;
    params.repetition_penalty = 1.3f;
    params.presence_penalty = 0.4f;
    params.frequency_penalty = 0.2f;
    params.logit_bias = {{2, 1.5f}, {5, -100.0f}, {6, 0.25f}};
    params.seed = 5;
  }
};

TEST(SamplerDeviceRow, AppliesBiasAndPenaltiesAsTheSamplerDoes) {
  AdjustedRequest req;
  for (const float temperature : {0.8f, 0.0f}) {
    req.params.temperature = temperature;
    Sampler sampler(req.params, req.prompt);
    for (int32_t t : req.generated) sampler.accept(t);
    runtime::SamplingBatch batch;
    sampler.add_device_row(batch);
    ASSERT_EQ(batch.rows.size(), 1u);
    // Repetition over prompt and generated tokens, each once: 1, 4, 7, 6, 300.
    EXPECT_EQ(batch.rows[0].penalty_count, 5);
    EXPECT_EQ(batch.rows[0].bias_count, 3);

    std::vector<float> adjusted = kSweepLogits;
    sampler.apply_bias_and_penalties(adjusted);
    if (temperature == 0.0f) {
      std::vector<float> row = kSweepLogits;
      EXPECT_EQ(runtime::sample_row(row, batch, 0), sampler.sample(kSweepLogits)->token);
    } else {
      expect_counts_match(sweep_counts(kSweepLogits, batch), reference_probs(adjusted, temperature));
    }
  }
}

TEST(SamplerDeviceRow, RowsTakeTheSamplersSeededDrawsInTurn) {
  AdjustedRequest req;
  Sampler a(req.params, req.prompt), b(req.params, req.prompt);
  req.params.seed = 6;
  Sampler other(req.params, req.prompt);
  runtime::SamplingBatch batch;
  for (int i = 0; i < 3; ++i) {
    a.add_device_row(batch);
    b.add_device_row(batch);
    other.add_device_row(batch);
  }
  for (size_t i = 0; i < 9; i += 3) {
    EXPECT_EQ(batch.rows[i].uniform, batch.rows[i + 1].uniform);
    EXPECT_NE(batch.rows[i].uniform, batch.rows[i + 2].uniform);
    if (i > 0) {
      EXPECT_NE(batch.rows[i].uniform, batch.rows[i - 3].uniform);
    }
  }
  // Greedy rows take no draw.
  req.params.temperature = 0.0f;
  Sampler greedy(req.params, req.prompt);
  greedy.add_device_row(batch);
  EXPECT_EQ(batch.rows.back().uniform, 0.0);
  EXPECT_TRUE(runtime::validate(batch, static_cast<int64_t>(batch.rows.size())));
}

}  // namespace
}  // namespace kiln::llm

namespace kiln::llm {
namespace {

// min_tokens: the ending tokens get -inf until that many tokens are accepted, in sample() and in
// the device row alike (where a held token with a logit bias is listed once, at -inf).
TEST(SamplerMinTokens, EndingTokensAreHeldBackUntilMinTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 8;
  p.min_tokens = 2;
  p.logit_bias = {{3, 1.0f}};
  Sampler sampler(p, {});
  sampler.hold_back({3, 5, 3});
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, 9.0f, 0.0f, 8.0f};
  for (int step = 0; step < 3; ++step) {
    auto c = sampler.sample(logits);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->token, step < 2 ? 2 : 3) << "step " << step;
    runtime::SamplingBatch batch;
    sampler.add_device_row(batch);
    const int32_t listed = batch.rows[0].bias_count;
    EXPECT_EQ(listed, step < 2 ? 2 : 1) << "token 3 once, token 5 while held";
    for (size_t i = 0; i < batch.bias_tokens.size(); ++i) {
      const bool held = step < 2;
      if (batch.bias_tokens[i] == 3) {
        EXPECT_EQ(batch.bias_values[i], held ? -kInf : 1.0f);
      }
    }
    sampler.accept(c->token);
  }
  EXPECT_TRUE(validate(p, 6).is_ok());
  p.min_tokens = 9;
  EXPECT_NE(validate(p, 6).message().find("min_tokens"), std::string::npos);
}

}  // namespace
}  // namespace kiln::llm
