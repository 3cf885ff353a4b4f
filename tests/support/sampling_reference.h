// A double-precision reference of the transformers logits-warper rules, for the tests of the
// samplers (llm::Sampler and device sampling).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/device_sampling.h"

namespace kiln::testing {

// The transformers warpers in double precision, written from their documented rules:
// temperature, then top-k, then top-p (sort ascending, drop tokens whose cumulative probability
// is <= 1 - top_p, keep at least one), then min-p (drop p < min_p * max p). Returns the final
// distribution over all tokens.
inline std::vector<double> reference_probs(const std::vector<float>& logits, double temperature, int top_k = 0,
                                           double top_p = 1.0, double min_p = 0.0) {
  const size_t n = logits.size();
  std::vector<double> scores(n);
  for (size_t i = 0; i < n; ++i) scores[i] = logits[i] / temperature;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  auto softmax = [&] {
    const double max = *std::max_element(scores.begin(), scores.end());
    std::vector<double> p(n);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += p[i] = std::exp(scores[i] - max);
    for (double& v : p) v /= sum;
    return p;
  };
  if (top_k > 0 && static_cast<size_t>(top_k) < n) {
    std::vector<double> sorted = scores;
    std::sort(sorted.rbegin(), sorted.rend());
    const double kth = sorted[static_cast<size_t>(top_k) - 1];
    for (double& s : scores) {
      if (s < kth) s = neg_inf;
    }
  }
  if (top_p < 1.0) {
    const std::vector<double> p = softmax();
    std::vector<size_t> ascending(n);
    std::iota(ascending.begin(), ascending.end(), 0);
    std::sort(ascending.begin(), ascending.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
    double cumulative = 0.0;
    for (size_t j = 0; j + 1 < n; ++j) {
      cumulative += p[ascending[j]];
      if (cumulative <= 1.0 - top_p) scores[ascending[j]] = neg_inf;
    }
  }
  if (min_p > 0.0) {
    const std::vector<double> p = softmax();
    const double top = *std::max_element(p.begin(), p.end());
    for (size_t i = 0; i < n; ++i) {
      if (p[i] < min_p * top) scores[i] = neg_inf;
    }
  }
  return softmax();
}

// Device sampling's draw is an inverse-CDF walk: sweeping its uniform draw over kSweep evenly
// spaced points gives each token kSweep times its probability, to within a draw or two.
inline constexpr int kSweep = 100000;

// Eight logits with no ties and clear gaps between cumulative probabilities.
inline const std::vector<float> kSweepLogits = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 1.5f, -2.0f};

// Token counts over `draws` evenly spaced draws of row 0 of `batch`.
inline std::vector<int64_t> sweep_counts(const std::vector<float>& logits, runtime::SamplingBatch batch,
                                         int draws = kSweep) {
  std::vector<int64_t> counts(logits.size(), 0);
  std::vector<float> row;
  for (int i = 0; i < draws; ++i) {
    batch.rows[0].uniform = (i + 0.5) / draws;
    row = logits;
    const int32_t token = runtime::sample_row(row, batch, 0);
    EXPECT_GE(token, 0);
    if (token < 0) break;
    ++counts[static_cast<size_t>(token)];
  }
  return counts;
}

// `counts` of sweep_counts() over `draws` draws against the probabilities.
inline void expect_counts_match(const std::vector<int64_t>& counts, const std::vector<double>& probs,
                                int draws = kSweep) {
  for (size_t t = 0; t < counts.size(); ++t) {
    // One draw for the walk's boundaries, one for the weights' float rounding.
    EXPECT_NEAR(static_cast<double>(counts[t]), probs[t] * draws, 2.0) << "token " << t;
    if (probs[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " is outside the kept set";
    }
  }
}

inline runtime::SamplingBatch one_row(float temperature, int32_t top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  runtime::SamplingBatch batch;
  runtime::RowSampling& row = batch.add_row();
  row.temperature = temperature;
  row.top_k = top_k;
  row.top_p = top_p;
  row.min_p = min_p;
  return batch;
}

}  // namespace kiln::testing
