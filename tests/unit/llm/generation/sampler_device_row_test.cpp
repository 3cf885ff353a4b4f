// Sampler's rows for device sampling (runtime/device_sampling.h): the same bias and
// penalties as Sampler::sample applies, and the sequence's own seeded draws, one a row.
#include <gtest/gtest.h>

#include <vector>

#include "llm/generation/sampler.h"
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
