// SentencePieceTokenizer against the reference: Llama-2's tokenizer.model and the ids that
// Debian's python3-sentencepiece gives for the parity corpus. Both come from
// tests/parity/sentencepiece/setup.sh OUT_DIR; the tests read them from $KILN_PARITY_DIR.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "llm/tokenizers/sentencepiece_tokenizer.h"
#include "llm/tokenizers/tokenizer_formats.h"
#include "nlohmann/json.hpp"
#include "support/parity_data.h"

namespace kiln::llm {
namespace {

using kiln::testing::parity_file;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

struct ParityCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

std::vector<ParityCase> parity_cases() {
  std::vector<ParityCase> cases;
  std::istringstream lines(parity_file("llama2.expected.jsonl"));
  std::string line;
  while (std::getline(lines, line)) {
    const nlohmann::json row = nlohmann::json::parse(line);
    ParityCase c;
    c.text = row.contains("text") ? row["text"].get<std::string>() : from_hex(row["text_hex"].get<std::string>());
    c.ids = row["ids"].get<std::vector<int32_t>>();
    c.decoded = row["decoded"].get<std::string>();
    cases.push_back(std::move(c));
  }
  return cases;
}

class SentencePieceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = std::make_unique<std::string>(parity_file("llama2.model"));
    ASSERT_FALSE(model_->empty()) << "no Llama-2 model to test with";
    auto t = SentencePieceTokenizer::load(*model_);
    ASSERT_TRUE(t) << t.status().message();
    tok_ = std::move(*t);
  }
  std::vector<int32_t> encode(std::string_view text, bool special = true) {
    auto ids = tok_->encode(text, special);
    EXPECT_TRUE(ids) << ids.status().message();
    return ids ? *ids : std::vector<int32_t>();
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip = false) {
    auto text = tok_->decode(ids, skip);
    EXPECT_TRUE(text) << text.status().message();
    return text ? *text : std::string();
  }

  std::unique_ptr<std::string> model_;  // the bytes of Llama-2's tokenizer.model
  std::unique_ptr<SentencePieceTokenizer> tok_;
};

TEST_F(SentencePieceTest, MatchesReferenceIdsAndDecodeOverCorpus) {
  const std::vector<ParityCase> cases = parity_cases();
  ASSERT_GE(cases.size(), 70u);
  size_t mismatched = 0;
  for (const ParityCase& c : cases) {
    const std::vector<int32_t> ids = encode(c.text);
    if (ids != c.ids && ++mismatched <= 10) ADD_FAILURE() << "ids differ for: " << c.text;
    EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), encode(c.text, false)) << c.text;
    EXPECT_EQ(decode(c.ids, /*skip=*/true), c.decoded) << c.text;
    // Without skipping, only the BOS text is added in front, with the space the dummy prefix
    // took when the first piece has one.
    const std::string shown = decode(c.ids);
    ASSERT_EQ(shown.rfind("<s>", 0), 0u) << shown;
    std::string rest = shown.substr(3);
    if (c.ids.size() > 1 && tok_->id_to_token(c.ids[1])->rfind("\xE2\x96\x81", 0) == 0) {
      ASSERT_EQ(rest.rfind(' ', 0), 0u) << shown;
      rest = rest.substr(1);
    }
    EXPECT_EQ(rest, c.decoded) << c.text;
  }
  EXPECT_EQ(mismatched, 0u) << "of " << cases.size() << " cases";
}

TEST_F(SentencePieceTest, VocabularyAndSpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), 32000);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_FALSE(tok_->is_special(0));  // <unk> is an ordinary piece that decodes to " ⁇ "
  EXPECT_TRUE(tok_->is_special(1));
  EXPECT_TRUE(tok_->is_special(2));
  EXPECT_FALSE(tok_->is_special(3));  // <0x00>
  EXPECT_FALSE(tok_->is_special(15043));
  EXPECT_FALSE(tok_->is_special(-1));
  EXPECT_FALSE(tok_->is_special(32000));
  EXPECT_EQ(tok_->token_to_id("\xE2\x96\x81Hello"), 15043);
  EXPECT_EQ(tok_->token_to_id("<unk>"), 0);
  EXPECT_EQ(tok_->token_to_id("<0xF0>"), 243);
  EXPECT_EQ(tok_->token_to_id("no such piece here"), std::nullopt);
  EXPECT_EQ(tok_->token_to_id(""), std::nullopt);
  EXPECT_EQ(tok_->id_to_token(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(tok_->id_to_token(2), "</s>");
  EXPECT_EQ(tok_->id_to_token(32000), std::nullopt);
  EXPECT_EQ(tok_->id_to_token(-1), std::nullopt);
}

TEST_F(SentencePieceTest, DecodeShowsOrSkipsControlTokens) {
  EXPECT_EQ(decode({1, 15043, 2}), "<s> Hello</s>");
  EXPECT_EQ(decode({1, 15043, 2}, true), "Hello");
  EXPECT_EQ(decode({15043, 2, 15043}), "Hello</s> Hello");
  EXPECT_EQ(decode({15043, 2, 15043}, true), "Hello Hello");
  EXPECT_EQ(decode({1, 243, 162, 167, 154}), "<s>\xF0\x9F\xA4\x97");  // byte fallback: no space
  EXPECT_EQ(decode({1, 0}), "<s> \xE2\x81\x87 ");                       // <unk> is SentencePiece's " ⁇ "
  EXPECT_EQ(decode({243, 162}, true), "\xEF\xBF\xBD\xEF\xBF\xBD");      // one U+FFFD per incomplete byte
  EXPECT_EQ(decode({}), "");
}

TEST_F(SentencePieceTest, OutOfVocabularyIdsAreErrors) {
  for (int32_t bad : {32000, -1, 1 << 30}) {
    auto text = tok_->decode(std::vector<int32_t>{15043, bad});
    ASSERT_FALSE(text) << bad;
    EXPECT_NE(text.status().message().find("outside the vocabulary (32000 tokens)"), std::string::npos)
        << text.status().message();
    EXPECT_FALSE(tok_->decode(std::vector<int32_t>{bad}, true)) << bad;
  }
}

TEST_F(SentencePieceTest, BosAndEosOptions) {
  SentencePieceOptions o;
  o.add_bos = false;
  o.add_eos = true;
  auto t = SentencePieceTokenizer::load(*model_, o);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(*(*t)->encode("Hello"), (std::vector<int32_t>{15043, 2}));
  EXPECT_EQ(*(*t)->encode("Hello", false), (std::vector<int32_t>{15043}));

  o = {};
  o.eos_token = "<unk>";
  t = SentencePieceTokenizer::load(*model_, o);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ((*t)->eos_id(), 0);

  o.eos_token = "<|not a piece|>";
  t = SentencePieceTokenizer::load(*model_, o);
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find("<|not a piece|>"), std::string::npos) << t.status().message();
}

TEST_F(SentencePieceTest, OptionsFromTokenizerConfig) {
  // What Llama-2's tokenizer_config.json says, abridged.
  const std::string llama2 = R"({
    "add_bos_token": true, "add_eos_token": false, "legacy": false,
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>", "pad_token": null, "unk_token": "<unk>",
    "added_tokens_decoder": {"0": {"content": "<unk>", "special": true},
                             "1": {"content": "<s>", "special": true},
                             "2": {"content": "</s>", "special": true}}})";
  auto t = sentencepiece_tokenizer_from_model(*model_, llama2);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(*(*t)->encode("Hello"), (std::vector<int32_t>{1, 15043}));

  t = sentencepiece_tokenizer_from_model(*model_, R"({"add_bos_token": false, "add_eos_token": true})");
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(*(*t)->encode("Hello"), (std::vector<int32_t>{15043, 2}));

  const std::pair<const char*, const char*> bad[] = {
      {"{not json", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {R"({"add_bos_token": "yes"})", "'add_bos_token' must be true or false"},
      {R"({"eos_token": 5})", "'eos_token' must be a string"},
      {R"({"bos_token": "<nope>"})", "bos_token '<nope>' is not a piece"},
      {R"({"add_prefix_space": false})", "add_prefix_space"},
      {R"({"added_tokens_decoder": {"32000": {"content": "<pad>"}}})", "adds token '<pad>' (id 32000)"},
      {R"({"added_tokens_decoder": {"5": {"content": "<pad>"}}})", "adds token '<pad>' (id 5)"},
      {R"({"added_tokens_decoder": {"x": {"content": "<pad>"}}})", "needs a token id"},
  };
  for (const auto& [config, needle] : bad) {
    t = sentencepiece_tokenizer_from_model(*model_, config);
    ASSERT_FALSE(t) << config;
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << config << " -> " << t.status().message();
  }
}

TEST_F(SentencePieceTest, MalformedModelBytesAreErrors) {
  const std::string cases[] = {
      "",
      "not a sentencepiece model",
      std::string(64, '\xff'),
      model_->substr(0, 10),
      model_->substr(0, model_->size() / 2),
      model_->substr(0, model_->size() - 1),
  };
  for (const std::string& bytes : cases) {
    auto t = SentencePieceTokenizer::load(bytes);
    ASSERT_FALSE(t) << "accepted " << bytes.size() << " bytes";
    EXPECT_EQ(t.status().message().rfind("tokenizer.model: ", 0), 0u) << t.status().message();
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status().message();
  }
}

TEST_F(SentencePieceTest, EncodesConcurrently) {
  const std::vector<ParityCase> cases = parity_cases();
  std::vector<std::thread> threads;
  std::vector<size_t> wrong(4, 0);
  for (size_t t = 0; t < wrong.size(); ++t) {
    threads.emplace_back([&, t] {
      for (const ParityCase& c : cases) {
        auto ids = tok_->encode(c.text);
        auto text = tok_->decode(c.ids, true);
        if (!ids || *ids != c.ids || !text || *text != c.decoded) ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t w : wrong) EXPECT_EQ(w, 0u);
}

}  // namespace
}  // namespace kiln::llm
