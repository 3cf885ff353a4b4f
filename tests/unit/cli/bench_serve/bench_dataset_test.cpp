// Prompts for `kiln bench serve`: JSONL parsing with errors that name the line, and random
// prompts drawn from a real tokenizer's vocabulary (the demo model's).
#include <gtest/gtest.h>

#include "cli/bench_serve/bench_dataset.h"
#include "cli/bench_serve/random_dataset.h"

namespace kiln::cli::bench_serve {
namespace {

TEST(BenchServeDataset, ParsesTextAndTokenIdPrompts) {
  const std::string content =
      "{\"prompt\": \"Once upon a time\", \"output_len\": 16}\r\n"
      "\n"
      "   \n"
      "{\"prompt\": [1, 15043, 3186], \"max_tokens\": 4}\n"
      "{\"prompt\": \"no length\"}";
  auto p = parse_jsonl_dataset(content, "d.jsonl", 7);
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].text, "Once upon a time");
  EXPECT_FALSE((*p)[0].is_ids());
  EXPECT_EQ((*p)[0].output_len, 16);
  EXPECT_FALSE((*p)[0].prompt_tokens);
  EXPECT_EQ((*p)[1].ids, (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ((*p)[1].prompt_tokens, 3);
  EXPECT_EQ((*p)[1].output_len, 4);
  EXPECT_EQ((*p)[2].output_len, 7);
}

TEST(BenchServeDataset, BadLinesNameFileLineAndProblem) {
  struct Case {
    std::string line, needle;
  };
  const std::vector<Case> cases = {
      {"{\"prompt\": \"a\", \"output_len\": 2", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"text\": \"a\", \"output_len\": 2}", "no \"prompt\""},
      {"{\"prompt\": \"\", \"output_len\": 2}", "\"prompt\" is empty"},
      {"{\"prompt\": [], \"output_len\": 2}", "empty list"},
      {"{\"prompt\": [1, -2], \"output_len\": 2}", "\"prompt\"[1] is -2"},
      {"{\"prompt\": [1, 2.5], \"output_len\": 2}", "\"prompt\"[1] is 2.5"},
      {"{\"prompt\": [1, 4294967296], \"output_len\": 2}", "not a token id"},
      {"{\"prompt\": 5, \"output_len\": 2}", "string or a list of token ids"},
      {"{\"prompt\": \"a\", \"output_len\": 0}", "\"output_len\" must be an integer >= 1"},
      {"{\"prompt\": \"a\", \"max_tokens\": \"3\"}", "\"max_tokens\" must be an integer >= 1"},
      {"{\"prompt\": \"a\"}", "no \"output_len\""},
  };
  for (const Case& c : cases) {
    const std::string content = "{\"prompt\": \"fine\", \"output_len\": 1}\n\n" + c.line + "\n";
    auto p = parse_jsonl_dataset(content, "bad.jsonl", std::nullopt);
    ASSERT_FALSE(p) << c.line;
    const std::string m = p.status().message();
    EXPECT_EQ(m.rfind("bad.jsonl:3: ", 0), 0u) << m;
    EXPECT_NE(m.find(c.needle), std::string::npos) << m;
  }
}

TEST(BenchServeDataset, EmptyAndMissingFilesAreErrors) {
  auto empty = parse_jsonl_dataset("\n\n", "e.jsonl", 1);
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.status().message().find("no prompts"), std::string::npos);
  auto missing = load_jsonl_dataset("/nonexistent/kiln/d.jsonl", 1);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("/nonexistent/kiln/d.jsonl"), std::string::npos);
}

class BenchServeRandomDataset : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto files = llm::tokenizer_files_in_dir(std::string(KILN_SOURCE_DIR) + "/models/demo");
    ASSERT_TRUE(files) << files.status().message();
    auto t = llm::tokenizer_from_files(*files);
    ASSERT_TRUE(t) << t.status().message();
    tokenizer_ = std::move(*t).release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  static llm::Tokenizer* tokenizer_;
};
llm::Tokenizer* BenchServeRandomDataset::tokenizer_ = nullptr;

TEST_F(BenchServeRandomDataset, TokenIdPromptsHaveTheDrawnLengthsAndNoSpecialTokens) {
  RandomSpec spec{500, 40, 20, 0.5, 9, false};
  auto p = random_dataset(spec, *tokenizer_);
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_EQ(p->size(), 500u);
  int64_t shortest = 1000, longest = 0;
  for (const BenchPrompt& q : *p) {
    ASSERT_TRUE(q.is_ids());
    EXPECT_EQ(q.prompt_tokens, static_cast<int64_t>(q.ids.size()));
    shortest = std::min<int64_t>(shortest, static_cast<int64_t>(q.ids.size()));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(q.ids.size()));
    EXPECT_GE(q.output_len, 10);
    EXPECT_LE(q.output_len, 30);
    for (int32_t id : q.ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tokenizer_->vocab_size());
      ASSERT_FALSE(tokenizer_->is_special(id)) << id;
    }
  }
  EXPECT_EQ(shortest, 20);  // 500 uniform draws from [20, 60] reach both ends
  EXPECT_EQ(longest, 60);
}

TEST_F(BenchServeRandomDataset, FixedLengthsWithoutRangeAndSameSeedSamePrompts) {
  RandomSpec spec{20, 33, 7, 0.0, 5, false};
  auto a = random_dataset(spec, *tokenizer_);
  auto b = random_dataset(spec, *tokenizer_);
  spec.seed = 6;
  auto c = random_dataset(spec, *tokenizer_);
  ASSERT_TRUE(a && b && c);
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].ids.size(), 33u);
    EXPECT_EQ((*a)[i].output_len, 7);
    EXPECT_EQ((*a)[i].ids, (*b)[i].ids);
  }
  EXPECT_NE((*a)[0].ids, (*c)[0].ids);
}

TEST_F(BenchServeRandomDataset, TextPromptsForChat) {
  auto p = random_dataset({5, 64, 8, 0.0, 1, true}, *tokenizer_);
  ASSERT_TRUE(p) << p.status().message();
  for (const BenchPrompt& q : *p) {
    EXPECT_FALSE(q.is_ids());
    EXPECT_FALSE(q.text.empty());
    ASSERT_TRUE(q.prompt_tokens);
    EXPECT_GT(*q.prompt_tokens, 16);  // a decode/encode round trip keeps roughly the drawn length
    EXPECT_LT(*q.prompt_tokens, 256);
  }
}

TEST_F(BenchServeRandomDataset, RejectsBadSpecs) {
  EXPECT_FALSE(random_dataset({0, 10, 10, 0, 0, false}, *tokenizer_));
  EXPECT_FALSE(random_dataset({1, 0, 10, 0, 0, false}, *tokenizer_));
  EXPECT_FALSE(random_dataset({1, 10, 0, 0, 0, false}, *tokenizer_));
  EXPECT_FALSE(random_dataset({1, 10, 10, 1.0, 0, false}, *tokenizer_));
  EXPECT_FALSE(random_dataset({1, 10, 10, -0.1, 0, false}, *tokenizer_));
}

}  // namespace
}  // namespace kiln::cli::bench_serve
