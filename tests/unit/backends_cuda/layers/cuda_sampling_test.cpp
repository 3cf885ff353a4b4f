// Device sampling on the GPU (cuda_sampling.h) against its host reference, runtime::sample_row():
// the kernel computes the same values by the same operations, so every row must give the same
// token, over odd and real vocabulary sizes, ties, non-finite logits and every parameter.
// Then the backend's sampled steps against sample_row() over the same step's logits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cuda/layers/cuda_sampling.h"
#include "runtime/device_sampling.h"
#include "unit/backends_cuda/cuda_test_support.h"

namespace kiln::cuda {
namespace {

using testing::DeviceArray;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows of every kind for a vocabulary of `vocab`: greedy, plain, each truncation, their
// combinations, penalties and bias, with logits drawn, tied or non-finite.
struct Case {
  std::vector<float> logits;  // [rows, vocab]
  runtime::SamplingBatch batch;
};

Case make_case(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  Case c;
  const struct {
    float temperature;
    int32_t top_k;
    float top_p, min_p, repetition, presence, frequency;
    int bias;  // entries of logit bias
    int kind;  // 0 drawn, 1 on a grid of 0.5 (many ties), 2 two +inf, 3 all NaN
  } rows[] = {
      {0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},    {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},
      {0.7f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},   {1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},
      {1.0f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 0, 0},   {0.8f, 50, 0.95f, 0.02f, 1.0f, 0.0f, 0.0f, 0, 0},
      {1.2f, 2000, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0}, {0.9f, 0, 0.9f, 0.0f, 1.3f, 0.4f, 0.2f, 5, 0},
      {0.0f, 0, 1.0f, 0.0f, 1.2f, 0.0f, 0.5f, 3, 0},    {1.0f, 7, 0.8f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 1},
      {1.0f, 0, 0.3f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 1},    {1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},
      {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 2},    {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 3},
      {1e-4f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},   {5.0f, 0, 0.99f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},
  };
  int index = 0;
  for (const auto& r : rows) {
    for (int i = 0; i < vocab; ++i) {
      const float x = normal(rng);
      c.logits.push_back(r.kind == 1 ? std::round(x * 2.0f) / 2.0f : r.kind == 3 ? NAN : x);
    }
    if (r.kind == 2) {
      c.logits[c.logits.size() - static_cast<size_t>(vocab) + static_cast<size_t>(token(rng))] = kInf;
      c.logits.back() = kInf;
    }
    runtime::RowSampling& row = c.batch.add_row();
    row.temperature = r.temperature;
    row.top_k = r.top_k;
    row.top_p = r.top_p;
    row.min_p = r.min_p;
    row.repetition_penalty = r.repetition;
    row.presence_penalty = r.presence;
    row.frequency_penalty = r.frequency;
    row.uniform = uniform(rng);
    // Every third row has a token mask (structured outputs): random words, or one token alone.
    if (index++ % 3 == 1) {
      std::vector<uint64_t> mask(static_cast<size_t>((vocab + 63) / 64));
      if (index % 2 == 0) {
        for (auto& w : mask) w = (static_cast<uint64_t>(rng()) << 32) | rng();
      } else {
        const int32_t t = token(rng);
        mask[static_cast<size_t>(t / 64)] = uint64_t{1} << (t % 64);
      }
      c.batch.set_mask(row, mask);
    }
    // Distinct tokens in each list, as the Sampler writes them.
    std::vector<int32_t> used;
    auto fresh = [&] {
      int32_t t = token(rng);
      while (std::find(used.begin(), used.end(), t) != used.end()) t = (t + 1) % vocab;
      used.push_back(t);
      return t;
    };
    for (int b = 0; b < r.bias && b < vocab; ++b) {
      c.batch.bias_tokens.push_back(fresh());
      c.batch.bias_values.push_back(b % 2 == 0 ? 4.0f : -100.0f);
      ++row.bias_count;
    }
    used.clear();
    if (r.repetition != 1.0f || r.presence != 0.0f) {
      for (int p = 0; p < std::min(vocab, 30); ++p) {
        c.batch.penalty_tokens.push_back(fresh());
        c.batch.penalty_counts.push_back(p % 3);
        ++row.penalty_count;
      }
    }
  }
  return c;
}

std::vector<int32_t> on_gpu(const Case& c, int vocab) {
  const auto& b = c.batch;
  DeviceArray<float> logits(c.logits);
  DeviceArray<runtime::RowSampling> rows(b.rows);
  DeviceArray<int32_t> bias_tokens(b.bias_tokens), penalty_tokens(b.penalty_tokens), penalty_counts(b.penalty_counts);
  DeviceArray<float> bias_values(b.bias_values);
  DeviceArray<int32_t> ids(b.rows.size());
  DeviceArray<uint64_t> mask_words(b.mask_words);
  DeviceSamplingRows s{rows.get(),           bias_tokens.get(),  bias_values.get(), penalty_tokens.get(),
                       penalty_counts.get(), mask_words.get(),   b.mask_stride};
  launch_sample_rows(logits.get(), static_cast<int64_t>(b.rows.size()), vocab, s, ids.get(), nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return ids.download();
}

std::vector<int32_t> on_host(const Case& c, int vocab) {
  std::vector<int32_t> ids;
  for (size_t r = 0; r < c.batch.rows.size(); ++r) {
    std::vector<float> row(c.logits.begin() + static_cast<long>(r) * vocab,
                           c.logits.begin() + static_cast<long>(r + 1) * vocab);
    ids.push_back(runtime::sample_row(row, c.batch, r));
  }
  return ids;
}

TEST(CudaSampling, KernelChoosesTheHostReferencesTokens) {
  KILN_REQUIRE_GPU();
  for (const int vocab : {7, 1000, 5125, 32000, 151936}) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const Case c = make_case(vocab, seed * 977u + static_cast<uint32_t>(vocab));
      const std::vector<int32_t> host = on_host(c, vocab);
      EXPECT_EQ(on_gpu(c, vocab), host) << "vocab " << vocab << " seed " << seed;
      EXPECT_EQ(host[13], -1);  // the all-NaN row
    }
  }
}

// Many draws of one row on the GPU follow the row's distribution: with the uniform draw swept
// over evenly spaced points, each token comes up in proportion to its probability.
TEST(CudaSampling, SweptDrawsFollowTheRowsProbabilities) {
  KILN_REQUIRE_GPU();
  constexpr int kVocab = 8, kRows = 4096;
  const std::vector<float> row = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 1.5f, -2.0f};
  Case c;
  for (int i = 0; i < kRows; ++i) {
    c.logits.insert(c.logits.end(), row.begin(), row.end());
    runtime::RowSampling& r = c.batch.add_row();
    r.temperature = 1.0f;
    r.uniform = (i + 0.5) / kRows;
  }
  const std::vector<int32_t> ids = on_gpu(c, kVocab);
  std::vector<int> counts(kVocab, 0);
  for (int32_t t : ids) ++counts[static_cast<size_t>(t)];
  double sum = 0.0;
  for (float x : row) sum += std::exp(static_cast<double>(x) - 3.0);
  for (int t = 0; t < kVocab; ++t) {
    EXPECT_NEAR(counts[static_cast<size_t>(t)], kRows * std::exp(row[static_cast<size_t>(t)] - 3.0) / sum, 1.5) << t;
  }
}

}  // namespace
}  // namespace kiln::cuda
