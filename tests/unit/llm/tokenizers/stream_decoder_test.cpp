// StreamDecoder: pushing ids one at a time gives, concatenated, exactly the one-shot decode, and
// no push returns invalid UTF-8. Over Llama-2's SentencePiece model (from $KILN_PARITY_DIR, see
// tests/parity/sentencepiece/setup.sh) with the parity corpus and with random id sequences rich
// in byte-fallback pieces and control tokens, and over every tokenizer.json / vocab.json +
// merges.txt model of the shared parity data ($KILN_PARITY_DIR/files/<name>/ with the corpus ids
// in $KILN_PARITY_DIR/<name>.expected.jsonl, from tests/parity/setup.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <random>

#include "llm/tokenizers/sentencepiece_tokenizer.h"
#include "llm/tokenizers/stream_decoder.h"
#include "llm/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "support/parity_data.h"

namespace kiln::llm {
namespace {

using kiln::testing::parity_file;

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF, nothing cut off.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Streams `ids` through a decoder; checks every push and that the pieces add up to decode(ids).
void expect_streams_like_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                                const std::string& what) {
  StreamDecoder stream(tok, skip);
  std::string streamed;
  size_t longest_window = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto piece = stream.push(ids[i]);
    ASSERT_TRUE(piece) << what << ": " << piece.status().message();
    ASSERT_TRUE(valid_utf8(*piece)) << what << ": push " << i << " returned invalid UTF-8";
    streamed += *piece;
    longest_window = std::max(longest_window, stream.window_size());
  }
  // The window follows the text: pushes cost the same at the end of a long text as at its start.
  EXPECT_LE(longest_window, 24u) << what;
  const std::string rest = stream.finish();
  ASSERT_TRUE(valid_utf8(rest)) << what;
  streamed += rest;
  auto whole = tok.decode(ids, skip);
  ASSERT_TRUE(whole) << whole.status().message();
  ASSERT_EQ(streamed, *whole) << what << (skip ? " (skipping special tokens)" : "");
}

class StreamDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string model = parity_file("llama2.model");
    ASSERT_FALSE(model.empty()) << "no Llama-2 model to test with";
    auto t = SentencePieceTokenizer::load(model);
    ASSERT_TRUE(t) << t.status().message();
    tok_ = std::move(*t);
  }
  std::unique_ptr<SentencePieceTokenizer> tok_;
};

TEST(Utf8TailTest, FindsUnfinishedEndings) {
  EXPECT_FALSE(utf8_tail_is_unfinished(""));
  EXPECT_FALSE(utf8_tail_is_unfinished("abc"));
  EXPECT_FALSE(utf8_tail_is_unfinished("\xE4\xBD\xA0"));          // 你
  EXPECT_FALSE(utf8_tail_is_unfinished("a\xF0\x9F\xA4\x97"));     // 🤗
  EXPECT_TRUE(utf8_tail_is_unfinished("a\xEF\xBF\xBD"));          // U+FFFD
  EXPECT_TRUE(utf8_tail_is_unfinished("a\xF0\x9F\xA4"));          // 3 of 4 bytes
  EXPECT_TRUE(utf8_tail_is_unfinished("\xE4"));
  EXPECT_TRUE(utf8_tail_is_unfinished("ab\xC3"));
  EXPECT_FALSE(utf8_tail_is_unfinished("\xC3\xA9"));              // é
  EXPECT_FALSE(utf8_tail_is_unfinished("x\x80"));                 // stray continuation: nothing can finish it
}

TEST(Utf8ValidatorTest, RejectsWhatItShould) {
  EXPECT_TRUE(valid_utf8("a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\xA4\x97"));
  EXPECT_FALSE(valid_utf8("\xC3"));
  EXPECT_FALSE(valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(valid_utf8("\xF0\x9F\xA4"));      // cut off
  EXPECT_FALSE(valid_utf8("\x80"));
}

TEST_F(StreamDecoderTest, ByteFallbackEmojiComesOutWhole) {
  StreamDecoder stream(*tok_);
  EXPECT_EQ(*stream.push(1), "<s>");
  EXPECT_EQ(*stream.push(15043), " Hello");
  EXPECT_EQ(*stream.push(29871), " ");  // "▁" inside the text is a space
  EXPECT_EQ(*stream.push(243), "");
  EXPECT_EQ(*stream.push(162), "");
  EXPECT_EQ(*stream.push(167), "");
  EXPECT_EQ(*stream.push(154), "\xF0\x9F\xA4\x97");  // the 4th byte completes it
  EXPECT_EQ(*stream.push(2), "</s>");
  EXPECT_EQ(stream.finish(), "");
}

TEST_F(StreamDecoderTest, FirstPieceLosesItsDummyPrefixSpace) {
  StreamDecoder stream(*tok_, /*skip_special_tokens=*/true);
  EXPECT_EQ(*stream.push(1), "");
  EXPECT_EQ(*stream.push(15043), "Hello");
  EXPECT_EQ(*stream.push(2), "");
  EXPECT_EQ(*stream.push(15043), " Hello");  // after a skipped </s>: still inside the text
  EXPECT_EQ(*stream.push(2), "");
  EXPECT_EQ(*stream.push(2), "");
  EXPECT_EQ(*stream.push(3186), " world");
  EXPECT_EQ(stream.finish(), "");

  StreamDecoder shown(*tok_);
  EXPECT_EQ(*shown.push(29871), "");  // "▁" first: the dummy-prefix space, dropped
  EXPECT_EQ(*shown.push(15043), " Hello");
  EXPECT_EQ(*shown.push(2), "</s>");
  EXPECT_EQ(*shown.push(15043), " Hello");
  EXPECT_EQ(shown.finish(), "");
}

TEST_F(StreamDecoderTest, FinishFlushesIncompleteBytesAndStartsOver) {
  StreamDecoder stream(*tok_);
  EXPECT_EQ(*stream.push(15043), "Hello");
  EXPECT_EQ(*stream.push(243), "");
  EXPECT_EQ(*stream.push(162), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // as decode() makes them
  EXPECT_EQ(*stream.push(15043), "Hello");                  // a new text: no leading space
  EXPECT_EQ(stream.finish(), "");
}

TEST_F(StreamDecoderTest, BadIdIsAnErrorAndChangesNothing) {
  StreamDecoder stream(*tok_);
  EXPECT_EQ(*stream.push(15043), "Hello");
  auto bad = stream.push(32000);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("outside the vocabulary"), std::string::npos);
  EXPECT_FALSE(stream.push(-5));
  EXPECT_EQ(*stream.push(3186), " world");
  EXPECT_EQ(stream.finish(), "");
}

TEST_F(StreamDecoderTest, CorpusStreamsLikeOneShotDecode) {
  std::istringstream lines(parity_file("llama2.expected.jsonl"));
  std::string line;
  std::vector<int32_t> everything;
  size_t n = 0;
  while (std::getline(lines, line)) {
    const std::vector<int32_t> ids = nlohmann::json::parse(line)["ids"].get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      expect_streams_like_decode(*tok_, ids, skip, "case " + std::to_string(n));
      expect_streams_like_decode(*tok_, std::vector<int32_t>(ids.begin() + 1, ids.end()), skip,
                                 "case " + std::to_string(n) + " without BOS");
    }
    everything.insert(everything.end(), ids.begin(), ids.end());
    everything.push_back(2);
    ++n;
  }
  ASSERT_GE(n, 70u);
  // One long generation that crosses every case, with BOS and EOS inside it.
  expect_streams_like_decode(*tok_, everything, false, "all cases in one sequence");
  expect_streams_like_decode(*tok_, everything, true, "all cases in one sequence");
}

TEST_F(StreamDecoderTest, RandomSequencesStreamLikeOneShotDecode) {
  // Ids a model could emit in any order: mostly byte-fallback pieces (so characters split over
  // tokens, invalid and incomplete sequences), control tokens, <unk>, "▁", and any piece.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int32_t> any(0, 31999);
  std::uniform_int_distribution<int32_t> byte(3, 258);
  std::uniform_int_distribution<int32_t> lead(3 + 0xC2, 3 + 0xF4);
  std::uniform_int_distribution<int32_t> cont(3 + 0x80, 3 + 0xBF);
  for (int seq = 0; seq < 300; ++seq) {
    std::vector<int32_t> ids;
    const int len = 1 + seq % 40;
    while (static_cast<int>(ids.size()) < len) {
      const int k = kind(rng);
      if (k < 3) {  // a well-formed or cut-off multi-byte character
        const int32_t b = lead(rng);
        ids.push_back(b);
        const int follow = b - 3 >= 0xF0 ? 3 : b - 3 >= 0xE0 ? 2 : 1;
        const int keep = kind(rng) < 7 ? follow : kind(rng) % (follow + 1);
        for (int j = 0; j < keep; ++j) ids.push_back(cont(rng));
      } else if (k < 5) {
        ids.push_back(byte(rng));
      } else if (k == 5) {
        ids.push_back(static_cast<int32_t>(kind(rng) % 3));  // <unk>, <s>, </s>
      } else if (k == 6) {
        ids.push_back(29871);  // "▁"
      } else {
        ids.push_back(any(rng));
      }
    }
    for (bool skip : {false, true}) {
      expect_streams_like_decode(*tok_, ids, skip, "random sequence " + std::to_string(seq));
    }
  }
}

TEST(StreamDecoderParityTest, EveryParityTokenizerStreamsLikeOneShotDecode) {
  namespace fs = std::filesystem;
  const char* dir = std::getenv("KILN_PARITY_DIR");
  ASSERT_TRUE(dir != nullptr && *dir != '\0')
      << "KILN_PARITY_DIR is not set: run tests/parity/setup.sh OUT_DIR and set KILN_PARITY_DIR=OUT_DIR";
  const fs::path files = fs::path(dir) / "files";
  ASSERT_TRUE(fs::is_directory(files)) << "no " << files.string() << ": run tests/parity/setup.sh " << dir;
  std::vector<fs::path> models;
  for (const auto& entry : fs::directory_iterator(files)) models.push_back(entry.path());
  std::sort(models.begin(), models.end());
  size_t tested = 0;
  for (const fs::path& model : models) {
    const std::string name = model.filename().string();
    auto found = tokenizer_files_in_dir(model.string());
    ASSERT_TRUE(found) << found.status().message();
    if (!found->count("tokenizer.json") && !(found->count("vocab.json") && found->count("merges.txt"))) continue;
    auto tok = tokenizer_from_files(*found);
    ASSERT_TRUE(tok) << name << ": " << tok.status().message();
    std::ifstream expected(fs::path(dir) / (name + ".expected.jsonl"));
    ASSERT_TRUE(expected) << "missing " << name << ".expected.jsonl in " << dir;
    std::vector<int32_t> everything;
    const std::optional<int32_t> eos = (*tok)->eos_id();
    std::string line;
    size_t n = 0;
    while (std::getline(expected, line)) {
      const std::vector<int32_t> ids = nlohmann::json::parse(line)["ids"].get<std::vector<int32_t>>();
      for (bool skip : {false, true}) {
        expect_streams_like_decode(**tok, ids, skip, name + " case " + std::to_string(n));
      }
      everything.insert(everything.end(), ids.begin(), ids.end());
      if (eos) everything.push_back(*eos);
      ++n;
    }
    EXPECT_GT(n, 0u) << name;
    for (bool skip : {false, true}) {
      expect_streams_like_decode(**tok, everything, skip, name + ": all cases in one sequence");
    }
    ++tested;
  }
  EXPECT_GE(tested, 1u) << "no tokenizer.json or vocab.json + merges.txt model under " << files.string();
}

}  // namespace
}  // namespace kiln::llm
