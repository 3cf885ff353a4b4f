// Parity of Kiln's tokenizers with the reference implementations on real vocabularies: the
// expected ids are written by tests/parity/setup.sh OUT_DIR (Hugging Face tokenizers binding,
// gpt-tokenizer) and read from $KILN_PARITY_DIR. Every string must give identical ids.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/tokenizers/bpe/gpt2_vocab.h"
#include "llm/tokenizers/hf/hf_tokenizer.h"
#include "llm/tokenizers/bpe/tiktoken.h"
#include "support/parity_data.h"

namespace kiln::llm {
namespace {

using kiln::testing::parity_dir;
using kiln::testing::read_file;

std::vector<nlohmann::json> read_expected(const std::string& name) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(parity_dir() + "/" + name + ".expected.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

enum class Kind { kHfByteLevel, kHfOther, kTiktoken };

void check_tokenizer(const std::string& name, const Tokenizer& tokenizer, Kind kind) {
  const std::vector<nlohmann::json> rows = read_expected(name);
  ASSERT_FALSE(rows.empty()) << "no expected ids for " << name << " in " << parity_dir();
  size_t tokens = 0, mismatches = 0, decode_mismatches = 0;
  for (const nlohmann::json& row : rows) {
    const std::string text = row["text"].get<std::string>();
    const auto expected = row["ids"].get<std::vector<int32_t>>();
    tokens += expected.size();
    Expected<std::vector<int32_t>> ids = tokenizer.encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.has_value()) << ids.status().message();
    if (*ids != expected) {
      ++mismatches;
      ADD_FAILURE() << name << ": ids differ for " << nlohmann::json(text).dump() << "\n  expected " << show(expected)
                    << "\n  actual   " << show(*ids);
    }
    if (kind == Kind::kTiktoken) {
      Expected<std::string> decoded = tokenizer.decode(expected);
      ASSERT_TRUE(decoded.has_value()) << decoded.status().message();
      if (*decoded != text) {
        ++decode_mismatches;
        ADD_FAILURE() << name << ": decode is not lossless for " << nlohmann::json(text).dump();
      }
      continue;
    }
    const auto expected_plain = row["ids_nospecial"].get<std::vector<int32_t>>();
    Expected<std::vector<int32_t>> plain = tokenizer.encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(plain.has_value()) << plain.status().message();
    if (*plain != expected_plain) {
      ++mismatches;
      ADD_FAILURE() << name << ": ids without special tokens differ for " << nlohmann::json(text).dump()
                    << "\n  expected " << show(expected_plain) << "\n  actual   " << show(*plain);
    }
    Expected<std::string> decoded = tokenizer.decode(expected, false);
    Expected<std::string> decoded_skip = tokenizer.decode(expected, true);
    ASSERT_TRUE(decoded.has_value() && decoded_skip.has_value());
    if (*decoded != row["decoded"].get<std::string>() || *decoded_skip != row["decoded_skip"].get<std::string>()) {
      ++decode_mismatches;
      ADD_FAILURE() << name << ": decode differs from the reference for " << nlohmann::json(text).dump()
                    << "\n  expected " << row["decoded"].dump() << "\n  actual   " << nlohmann::json(*decoded).dump();
    }
    // Byte-level BPE loses nothing: decoding the ids gives the text back, unless the normalizer
    // changed it (Qwen's NFC).
    if (kind == Kind::kHfByteLevel && !row["normalized_changes"].get<bool>()) {
      Expected<std::string> round_trip = tokenizer.decode(expected_plain, false);
      ASSERT_TRUE(round_trip.has_value());
      if (*round_trip != text) {
        ++decode_mismatches;
        ADD_FAILURE() << name << ": decode(encode(s)) != s for " << nlohmann::json(text).dump();
      }
    }
  }
  std::printf("[parity] %-12s %4zu strings %7zu tokens %3zu id mismatches %3zu decode mismatches\n", name.c_str(),
              rows.size(), tokens, mismatches, decode_mismatches);
}

class TokenizerParity : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(parity_dir().empty())
        << "KILN_PARITY_DIR is not set: run `tests/parity/setup.sh OUT_DIR` and set KILN_PARITY_DIR=OUT_DIR";
  }
  static std::string file(const std::string& name, const std::string& file_name) {
    return read_file(parity_dir() + "/files/" + name + "/" + file_name);
  }
  void check_hf(const std::string& name, Kind kind) {
    Expected<std::unique_ptr<Tokenizer>> tokenizer =
        hf_tokenizer_from_json(file(name, "tokenizer.json"), file(name, "tokenizer_config.json"));
    ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().message();
    check_tokenizer(name, **tokenizer, kind);
  }
  void check_tiktoken(const std::string& name, const char* pattern, const std::map<std::string, int32_t>& specials) {
    Expected<std::unique_ptr<Tokenizer>> tokenizer = tiktoken_tokenizer(file(name, name + ".tiktoken"), pattern, specials);
    ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().message();
    check_tokenizer(name, **tokenizer, Kind::kTiktoken);
  }
};

TEST_F(TokenizerParity, Llama3) { check_hf("llama3", Kind::kHfByteLevel); }
TEST_F(TokenizerParity, Qwen3) { check_hf("qwen3", Kind::kHfByteLevel); }
TEST_F(TokenizerParity, Mistral) { check_hf("mistral", Kind::kHfOther); }

TEST_F(TokenizerParity, Gpt2) {
  Expected<std::unique_ptr<Tokenizer>> tokenizer = gpt2_tokenizer_from_vocab(file("gpt2", "vocab.json"), file("gpt2", "merges.txt"));
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().message();
  check_tokenizer("gpt2", **tokenizer, Kind::kHfByteLevel);
}

TEST_F(TokenizerParity, Cl100k) {
  check_tiktoken("cl100k_base", kTiktokenCl100kPattern, tiktoken_cl100k_special_tokens());
}
TEST_F(TokenizerParity, O200k) { check_tiktoken("o200k_base", kTiktokenO200kPattern, tiktoken_o200k_special_tokens()); }

}  // namespace
}  // namespace kiln::llm
