// tokenizer_from_files picks the format from the files present and respects
// tokenizer_config.json; tokenizer_files_in_dir reads a model directory's tokenizer files.
// The SentencePiece cases use Llama-2's model from $KILN_PARITY_DIR (see
// tests/parity/sentencepiece/setup.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "llm/tokenizers/tokenizer.h"
#include "support/parity_data.h"

namespace kiln::llm {
namespace {

namespace fs = std::filesystem;

std::string parity_model() { return kiln::testing::parity_file("llama2.model"); }

void expect_error(const Expected<std::unique_ptr<Tokenizer>>& t, const std::string& needle) {
  ASSERT_FALSE(t) << "expected an error containing '" << needle << "'";
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
}

TEST(TokenizerFactoryTest, SentencePieceModelWithItsConfig) {
  const std::string model = parity_model();
  ASSERT_FALSE(model.empty());
  auto t = tokenizer_from_files({{"tokenizer.model", model}});
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(*(*t)->encode("Hello world"), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ((*t)->vocab_size(), 32000);

  t = tokenizer_from_files({{"tokenizer.model", model},
                            {"tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true})"},
                            {"generation_config.json", "{}"}});
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(*(*t)->encode("Hello world"), (std::vector<int32_t>{15043, 3186, 2}));

  expect_error(tokenizer_from_files({{"tokenizer.model", model}, {"tokenizer_config.json", "{oops"}}),
               "tokenizer_config.json");
  expect_error(tokenizer_from_files({{"tokenizer.model", "garbage"}}), "tokenizer.model: ");
}

TEST(TokenizerFactoryTest, TokenizerJsonComesFirstThenModelThenVocabAndMerges) {
  const std::string model = parity_model();
  ASSERT_FALSE(model.empty());
  // An unreadable tokenizer.json is used (and fails) even with a good tokenizer.model beside it.
  expect_error(tokenizer_from_files({{"tokenizer.json", "not json"}, {"tokenizer.model", model}}), "tokenizer.json");
  // tokenizer.model before vocab.json + merges.txt.
  auto t = tokenizer_from_files({{"tokenizer.model", model}, {"vocab.json", "not json"}, {"merges.txt", ""}});
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ((*t)->bos_id(), 1);
  expect_error(tokenizer_from_files({{"vocab.json", "not json"}, {"merges.txt", "#version: 0.2\n"}}),
               "vocab.json + merges.txt");
}

TEST(TokenizerFactoryTest, NoTokenizerSaysWhatItLookedFor) {
  auto t = tokenizer_from_files({});
  expect_error(t, "looked for tokenizer.json, tokenizer.model, or vocab.json with merges.txt (found: none)");
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  expect_error(tokenizer_from_files({{"vocab.json", "{}"}, {"tokenizer_config.json", "{}"}}),
               "(found: tokenizer_config.json, vocab.json)");
}

class TokenizerDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_tokenizer_dir_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& contents) {
    std::ofstream(dir_ / name, std::ios::binary) << contents;
  }
  fs::path dir_;
};

TEST_F(TokenizerDirTest, ReadsTokenizerFilesOnly) {
  const std::string model = parity_model();
  ASSERT_FALSE(model.empty());
  write("tokenizer.model", model);
  write("tokenizer_config.json", R"({"add_eos_token": true})");
  write("special_tokens_map.json", "");
  write("config.json", "{}");
  write("model.safetensors", "weights");
  fs::create_directories(dir_ / "vocab.json");  // a directory, not a file: ignored
  auto files = tokenizer_files_in_dir(dir_.string());
  ASSERT_TRUE(files) << files.status().message();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ(files->at("tokenizer.model"), model);
  EXPECT_EQ(files->at("tokenizer_config.json"), R"({"add_eos_token": true})");
  EXPECT_EQ(files->at("special_tokens_map.json"), "");
  auto t = tokenizer_from_files(*files);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ(*(*t)->encode("Hello"), (std::vector<int32_t>{1, 15043, 2}));
}

TEST_F(TokenizerDirTest, MissingDirectoryOrNoFiles) {
  auto files = tokenizer_files_in_dir((dir_ / "nope").string());
  ASSERT_FALSE(files);
  EXPECT_NE(files.status().message().find("is not a directory"), std::string::npos) << files.status().message();
  files = tokenizer_files_in_dir(dir_.string());
  ASSERT_TRUE(files) << files.status().message();
  EXPECT_TRUE(files->empty());
}

}  // namespace
}  // namespace kiln::llm
