#include "llm/serving/token_emitter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "llm/structured/grammar_cache.h"
#include "unit/llm/serving/serving_test_support.h"

namespace kiln::llm {
namespace {

constexpr size_t kVocab = 8192;  // the demo tokenizer's

const Tokenizer& demo_tokenizer() {
  static std::unique_ptr<Tokenizer> tokenizer = [] {
    auto files = tokenizer_files_in_dir(std::string(KILN_SOURCE_DIR) + "/models/demo");
    EXPECT_TRUE(files) << files.status().message();
    auto t = tokenizer_from_files(*files);
    EXPECT_TRUE(t) << t.status().message();
    return std::move(*t);
  }();
  return *tokenizer;
}

// A row whose largest logit is `token`.
std::vector<float> row_for(int32_t token) {
  std::vector<float> row(kVocab, 0.0f);
  row[static_cast<size_t>(token)] = 10.0f;
  return row;
}

using testing::greedy;

TEST(TokenEmitter, GreedyFastPathAgreesWithTheSampler) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  SamplingParams p = greedy(100);
  p.logprobs = 3;
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = {0, 5, 6};
  TokenEmitter emitter(p, prompt, demo_tokenizer(), false, {}, 1000);
  Sampler sampler(p, prompt);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> row(kVocab);
    for (float& v : row) v = normal(rng);
    if (i % 3 == 0) row[17] = std::numeric_limits<float>::quiet_NaN();
    if (i % 5 == 0) row[40] = row[41] = 100.0f;  // a tie goes to the lower id
    if (i % 7 == 0) row[35] = row[20] = 200.0f;  // ... also from a lane that comes later
    if (i % 11 == 0) row[kVocab - 1] = 300.0f;   // the last id
    if (i % 13 == 0) std::fill(row.begin(), row.end(), -1.0f);  // all equal: id 0
    RequestEvent event;
    auto token = emitter.step(row, event);
    ASSERT_TRUE(token) << token.status().message();
    auto expected = sampler.sample(row);
    ASSERT_TRUE(expected);
    EXPECT_EQ(*token, expected->token);
    ASSERT_EQ(event.tokens.size(), 1u);
    EXPECT_EQ(event.tokens[0].token, expected->token);
    ASSERT_TRUE(event.tokens[0].logprob.has_value());
    EXPECT_EQ(*event.tokens[0].logprob, *expected->logprob);
    ASSERT_EQ(event.tokens[0].top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(event.tokens[0].top[k].token, expected->top[k].token);
  }
}

TEST(TokenEmitter, GreedyPicksTheFirstLargestIdAtEveryRowLength) {
  // Row lengths that leave a tail after the vectors' whole steps, and the largest value placed in
  // the tail, in the body, tied across both, and absent (every logit -inf or NaN: the sampler's
  // error).
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (size_t n : {size_t{1}, size_t{5}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, kVocab - 27}) {
    for (int c = 0; c < 6; ++c) {
      SamplingParams p = greedy(100);
      p.ignore_eos = true;
      TokenEmitter emitter(p, {}, demo_tokenizer(), false, {}, 1000);
      std::vector<float> row(n);
      for (float& v : row) v = normal(rng);
      if (c == 1) row[n - 1] = 100.0f;                          // the last id, in the tail
      if (c == 2) row[n / 2] = row[n - 1] = 100.0f;             // a tie between body and tail
      if (c == 3) row[0] = std::numeric_limits<float>::quiet_NaN();
      if (c == 4) std::fill(row.begin(), row.end(), -std::numeric_limits<float>::infinity());
      if (c == 5) std::fill(row.begin(), row.end(), std::numeric_limits<float>::quiet_NaN());
      int32_t expected = -1;
      for (size_t i = 0; i < n; ++i) {
        if (row[i] > (expected < 0 ? -std::numeric_limits<float>::infinity() : row[static_cast<size_t>(expected)])) {
          expected = static_cast<int32_t>(i);
        }
      }
      RequestEvent event;
      auto token = emitter.step(row, event);
      if (expected < 0) {
        EXPECT_FALSE(token) << "n " << n << " case " << c;
        continue;
      }
      ASSERT_TRUE(token) << token.status().message();
      EXPECT_EQ(*token, expected) << "n " << n << " case " << c;
    }
  }
}

TEST(TokenEmitter, EndsAtTheEnginesMaximumLength) {
  SamplingParams p = greedy(10);
  p.ignore_eos = true;
  const std::vector<int32_t> prompt = {0, 300, 301, 302, 303};
  TokenEmitter emitter(p, prompt, demo_tokenizer(), false, {}, 7);
  for (int i = 0; i < 3; ++i) {
    RequestEvent event;
    ASSERT_TRUE(emitter.step(row_for(400 + i), event));
    EXPECT_EQ(event.finish, i < 2 ? FinishReason::kNone : FinishReason::kLength) << i;
    EXPECT_EQ(event.tokens.size(), 1u);
  }
  EXPECT_TRUE(emitter.finished());
  EXPECT_EQ(emitter.num_generated(), 3);
}

TEST(TokenEmitter, StopTokenIsNotEmittedButEosIs) {
  SamplingParams p = greedy(10);
  p.stop_token_ids = {77};
  const std::vector<int32_t> eos = {1};
  {
    TokenEmitter emitter(p, std::vector<int32_t>{0}, demo_tokenizer(), false, eos, 1000);
    RequestEvent event;
    ASSERT_TRUE(emitter.step(row_for(300), event));
    EXPECT_EQ(event.finish, FinishReason::kNone);
    ASSERT_TRUE(emitter.step(row_for(77), event));
    EXPECT_EQ(event.finish, FinishReason::kStop);
    EXPECT_TRUE(event.tokens.empty());
  }
  {
    TokenEmitter emitter(p, std::vector<int32_t>{0}, demo_tokenizer(), true, eos, 1000);
    RequestEvent event;
    ASSERT_TRUE(emitter.step(row_for(1), event));
    EXPECT_EQ(event.finish, FinishReason::kStop);
    ASSERT_EQ(event.tokens.size(), 1u);
    EXPECT_EQ(event.tokens[0].token, 1);
    EXPECT_EQ(event.text, "");
  }
}

TEST(TokenEmitter, TextOfTheDeltasIsTheDecodedText) {
  SamplingParams p = greedy(6);
  p.ignore_eos = true;
  const auto ids = demo_tokenizer().encode("Sherlock Holmes took a hand", false);
  ASSERT_TRUE(ids);
  ASSERT_GE(ids->size(), 4u);
  TokenEmitter emitter(p, std::vector<int32_t>{0}, demo_tokenizer(), false, {}, 1000);
  std::string text;
  for (int32_t id : *ids) {
    RequestEvent event;
    ASSERT_TRUE(emitter.step(row_for(id), event));
    text += event.text;
    if (emitter.finished()) break;
  }
  auto expected = demo_tokenizer().decode(std::span<const int32_t>(*ids).first(std::min<size_t>(ids->size(), 6)));
  ASSERT_TRUE(expected);
  EXPECT_EQ(text, *expected);
}

TEST(TokenEmitter, ARowWithoutAFiniteLogitIsAnError) {
  TokenEmitter emitter(greedy(4), std::vector<int32_t>{0}, demo_tokenizer(), false, {}, 1000);
  std::vector<float> row(kVocab, -std::numeric_limits<float>::infinity());
  row[3] = std::numeric_limits<float>::quiet_NaN();
  RequestEvent event;
  auto token = emitter.step(row, event);
  ASSERT_FALSE(token);
  EXPECT_EQ(token.status().code(), StatusCode::kInvalidArgument);
}

TEST(TokenEmitter, PromptTokenInfo) {
  std::vector<float> row(kVocab, 0.0f);
  row[9] = 2.0f;
  row[4] = 1.0f;
  const TokenInfo info = prompt_token_info(row, 4, 2);
  EXPECT_EQ(info.token, 4);
  const double norm = std::log(std::exp(2.0) + std::exp(1.0) + static_cast<double>(kVocab - 2));
  EXPECT_NEAR(*info.logprob, 1.0 - norm, 1e-5);
  ASSERT_EQ(info.top.size(), 2u);
  EXPECT_EQ(info.top[0].token, 9);
  EXPECT_EQ(info.top[1].token, 4);
}

// Random rows through a grammar: the text is always a sentence of it, each complete choice ends
// with kStop (by its end or by EOS where the grammar may end); sampled on the host (step) and
// through device sampling (the row's mask in the batch, chosen by device sampling's reference).
TEST(TokenEmitter, AGrammarHoldsEveryChoiceToItsLanguage) {
  structured::GrammarCache cache(demo_tokenizer());
  auto g = cache.get(structured::ConstraintKind::kRegex, "(cat|dog)s? [0-9]{1,3}( and more)?", "regex");
  ASSERT_TRUE(g.has_value()) << g.status().message();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const std::vector<int32_t> eos = {1};
  int stopped = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const bool on_device = trial % 2 == 1;
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = static_cast<uint64_t>(trial);
    p.max_tokens = 40;
    TokenEmitter emitter(p, std::vector<int32_t>{0}, demo_tokenizer(), false, eos, 1000, *g);
    EXPECT_TRUE(emitter.device_capable());
    std::string text;
    FinishReason finish = FinishReason::kNone;
    while (!emitter.finished()) {
      std::vector<float> row(kVocab);
      for (float& x : row) x = normal(rng);
      row[1] += 4.0f;  // EOS is likely whenever it is allowed
      RequestEvent event;
      if (on_device) {
        runtime::SamplingBatch batch;
        emitter.add_device_row(batch);
        ASSERT_GE(batch.rows[0].mask_begin, 0);
        ASSERT_TRUE(runtime::validate(batch, 1));
        ASSERT_TRUE(emitter.step_chosen(runtime::sample_row(row, batch, 0), event).has_value());
      } else {
        ASSERT_TRUE(emitter.step(row, event).has_value());
      }
      text += event.text;
      finish = event.finish;
    }
    structured::GrammarMatcher m(*g);
    if (finish == FinishReason::kStop) {
      ++stopped;
      EXPECT_TRUE(m.accept_bytes(text) && m.can_end()) << text;
    } else {
      EXPECT_EQ(finish, FinishReason::kLength);
      EXPECT_TRUE(m.accept_bytes(text)) << text;
    }
  }
  EXPECT_GT(stopped, 60);
}

}  // namespace
}  // namespace kiln::llm
