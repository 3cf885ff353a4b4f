// BPE building blocks: the merge order, byte fallback and unknown handling of BpeModel, UTF-8
// repair, the byte-level alphabet, regex translation, decoders and normalizers, and the
// vocab.json + merges.txt and tiktoken loaders on small hand-written files.
#include "llm/tokenizers/bpe/bpe_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llm/tokenizers/bpe/bpe_regex.h"
#include "llm/tokenizers/bpe/bpe_text.h"
#include "llm/tokenizers/hf/decoder.h"
#include "llm/tokenizers/bpe/gpt2_vocab.h"
#include "llm/tokenizers/hf/normalizer.h"
#include "llm/tokenizers/bpe/tiktoken.h"

namespace kiln::llm {
namespace {

using Ids = std::vector<int32_t>;
using Merges = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<BpeModel> model(BpeVocab vocab, const Merges& merges, BpeOptions options = {}) {
  Expected<std::unique_ptr<BpeModel>> m = BpeModel::create(std::move(vocab), merges, std::move(options));
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m.has_value() ? std::move(m).value() : nullptr;
}

Ids tokenize(const BpeModel& m, std::string_view word) {
  Ids ids;
  m.tokenize(word, ids);
  return ids;
}

TEST(BpeModel, MergePriorityIsTheRank) {
  const BpeVocab vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  EXPECT_EQ(tokenize(*model(vocab, {{"a", "b"}, {"b", "c"}}), "abc"), (Ids{3, 2}));
  EXPECT_EQ(tokenize(*model(vocab, {{"b", "c"}, {"a", "b"}}), "abc"), (Ids{0, 4}));
  EXPECT_EQ(tokenize(*model(vocab, {{"b", "c"}, {"a", "bc"}}), "abc"), (Ids{5}));
  // Equal ranks: the leftmost pair merges first, and the result is cached consistently.
  auto m = model({{"a", 0}, {"aa", 1}}, {{"a", "a"}});
  EXPECT_EQ(tokenize(*m, "aaa"), (Ids{1, 0}));
  EXPECT_EQ(tokenize(*m, "aaa"), (Ids{1, 0}));
  EXPECT_EQ(tokenize(*m, "aaaa"), (Ids{1, 1}));
  EXPECT_EQ(tokenize(*m, ""), Ids{});
}

TEST(BpeModel, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  // "abc" is in the vocabulary but no merge sequence reaches it.
  const BpeVocab vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}};
  EXPECT_EQ(tokenize(*model(vocab, {{"a", "b"}}), "abc"), (Ids{3, 2}));
  BpeOptions options;
  options.ignore_merges = true;
  EXPECT_EQ(tokenize(*model(vocab, {{"a", "b"}}, options), "abc"), (Ids{4}));
}

TEST(BpeModel, ByteFallbackAndUnknownCharacters) {
  BpeVocab vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  BpeOptions options;
  options.unk_token = "<unk>";
  options.byte_fallback = true;
  auto m = model(vocab, {}, options);
  EXPECT_EQ(tokenize(*m, "a\xC3\xA9" "a"), (Ids{1, 2, 3, 1}));  // é -> <0xC3><0xA9>
  EXPECT_EQ(tokenize(*m, "xya"), (Ids{0, 0, 1}));              // no byte token for x: unk each
  options.fuse_unk = true;
  auto fused = model(vocab, {}, options);
  EXPECT_EQ(tokenize(*fused, "xya"), (Ids{0, 1}));
  EXPECT_EQ(tokenize(*fused, "xy\xC3\xA9z"), (Ids{2, 3, 0}));  // the reference emits a pending unk late
  options.unk_token.reset();
  EXPECT_EQ(tokenize(*model(vocab, {}, options), "xay"), (Ids{1}));  // no unk token: dropped
}

TEST(BpeModel, ContinuingSubwordPrefixAndSuffix) {
  BpeOptions options;
  options.continuing_subword_prefix = "##";
  options.end_of_word_suffix = "</w>";
  const BpeVocab vocab = {{"a", 0}, {"##b", 1}, {"##c</w>", 2}, {"ab", 3}, {"abc</w>", 4}};
  auto m = model(vocab, {{"a", "##b"}, {"ab", "##c</w>"}}, options);
  EXPECT_EQ(tokenize(*m, "abc"), (Ids{4}));
  EXPECT_EQ(tokenize(*m, "ab"), (Ids{0}));  // "##b</w>" is not in the vocabulary and there is no unk
}

TEST(BpeModel, BadMergesAreErrors) {
  EXPECT_FALSE(BpeModel::create({{"a", 0}}, {{"a", "x"}}, {}).has_value());
  Expected<std::unique_ptr<BpeModel>> m = BpeModel::create({{"a", 0}, {"b", 1}}, {{"a", "b"}}, {});
  ASSERT_FALSE(m.has_value());
  EXPECT_NE(m.status().message().find("'ab'"), std::string::npos) << m.status().message();
}

TEST(BpeText, Utf8RepairFollowsMaximalSubparts) {
  EXPECT_TRUE(utf8_is_valid("a\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8_is_valid("\xED\xA0\x80"));  // a surrogate
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a" + r + "b");
  EXPECT_EQ(utf8_sanitize("\xE4\xBD"), r);                    // truncated: one replacement
  EXPECT_EQ(utf8_sanitize("\xF0\x80\x80"), r + r + r);        // F0 80 is never valid: three
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), r + r);                // overlong
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80x"), r + r + r + "x");  // surrogate
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(utf8_length("a\xC3\xA9\xF0\x9F\x98\x80"), 3u);
}

TEST(BpeText, ByteLevelAlphabetIsABijection) {
  EXPECT_EQ(byte_level_char(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_level_char('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_level_char('a'), U'a');
  EXPECT_EQ(byte_level_encode(" \xC3\xA9"), "\xC4\xA0\xC3\x83\xC2\xA9");  // "ĠÃ©"
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_level_byte(byte_level_char(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(byte_level_byte(U'\u4E2D'), std::nullopt);
}

std::vector<std::string> find_all(const Regex& regex, const std::string& text) {
  std::vector<std::string> out;
  regex.find_all(text, [&](size_t s, size_t e) { out.push_back(text.substr(s, e - s)); });
  return out;
}

TEST(BpeRegex, OnigurumaWhitespaceIncludesNextLine) {
  EXPECT_EQ(regex_oniguruma_to_pcre2("\\s+(?!\\S)"), "[\\s\\x{85}]+(?![^\\s\\x{85}])");
  EXPECT_EQ(regex_oniguruma_to_pcre2("[^\\s\\p{L}]"), "[^\\s\\x{85}\\p{L}]");
  EXPECT_EQ(regex_oniguruma_to_pcre2("[]\\s]\\\\s"), "[]\\s\\x{85}]\\\\s");
  Expected<Regex> ws = Regex::compile("\\s+");
  ASSERT_TRUE(ws.has_value());
  EXPECT_EQ(find_all(*ws, "a\xC2\x85 b"), (std::vector<std::string>{"\xC2\x85 "}));
  Expected<Regex> gpt2 = Regex::compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
  ASSERT_TRUE(gpt2.has_value());
  EXPECT_EQ(find_all(*gpt2, "It's  2024, ok"), (std::vector<std::string>{"It", "'s", " ", " 2024", ",", " ok"}));
  Expected<Regex> literal = Regex::literal("a.b(");
  ASSERT_TRUE(literal.has_value());
  EXPECT_EQ(find_all(*literal, "a.b(axb(a.b("), (std::vector<std::string>{"a.b(", "a.b("}));
  Expected<Regex> bad = Regex::compile("(unclosed");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("(unclosed"), std::string::npos);
}

std::string run_decoder(const std::string& json, std::vector<std::string> tokens) {
  Expected<std::unique_ptr<TokenDecoder>> d = decoder_from_json(nlohmann::json::parse(json), "decoder");
  EXPECT_TRUE(d.has_value()) << d.status().message();
  if (!d.has_value()) return {};
  (*d)->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

// Expected strings checked against the Hugging Face tokenizers library's decoders.
TEST(Decoders, MatchReference) {
  EXPECT_EQ(run_decoder(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always"})", {"▁a▁b", "▁c", "d▁"}),
            "ab cd ");
  EXPECT_EQ(run_decoder(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"never"})", {"▁a▁b", "▁c"}), " a b c");
  EXPECT_EQ(run_decoder(R"({"type":"Strip","content":" ","start":1,"stop":0})", {"  a  ", "", " "}), " a  ");
  EXPECT_EQ(run_decoder(R"({"type":"Strip","content":" ","start":1,"stop":1})", {" ", " a "}), "a");
  EXPECT_EQ(run_decoder(R"({"type":"ByteFallback"})",
                        {"<0xE4>", "<0xBD>", "a", "<0xE4>", "<0xBD>", "<0xA0>", "<0x+A>", "<0xZZ>"}),
            "\xEF\xBF\xBD\xEF\xBF\xBD" "a\xE4\xBD\xA0\n<0xZZ>");
  EXPECT_EQ(run_decoder(R"({"type":"ByteLevel"})", {"Ġh", "Ã", "©", "<|x|>", "中"}), " h\xC3\xA9<|x|>中");
  EXPECT_EQ(run_decoder(R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},
                           {"type":"Fuse"}]})", {"▁a", "b▁"}), " ab ");
}

std::string run_normalizer(const std::string& json, const std::string& text) {
  Expected<std::unique_ptr<Normalizer>> n = normalizer_from_json(nlohmann::json::parse(json), "normalizer");
  EXPECT_TRUE(n.has_value()) << n.status().message();
  return n.has_value() ? (*n)->normalize(text) : std::string();
}

TEST(Normalizers, UnicodeFormsCaseAndStrip) {
  EXPECT_EQ(run_normalizer(R"({"type":"NFC"})", "e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(run_normalizer(R"({"type":"NFD"})", "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(run_normalizer(R"({"type":"NFKC"})", "\xEF\xAC\x81 \xE2\x91\xA0"), "fi 1");  // ﬁ ①
  EXPECT_EQ(run_normalizer(R"({"type":"NFKD"})", "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(run_normalizer(R"({"type":"Lowercase"})", "ÀB\xC4\xB0"), "àbi\xCC\x87");  // İ -> i + U+0307
  EXPECT_EQ(run_normalizer(R"({"type":"Strip","strip_left":true,"strip_right":true})", " \t\xE3\x80\x80x y\n"), "x y");
  EXPECT_EQ(run_normalizer(R"({"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"}]})", "\xC3\xA9t\xC3\xA9"),
            "ete");
  EXPECT_EQ(run_normalizer(R"({"type":"Prepend","prepend":"▁"})", ""), "");
  EXPECT_EQ(run_normalizer(R"({"type":"Replace","pattern":{"Regex":"\\s+"},"content":"_"})", "a  b\tc"), "a_b_c");
}

TEST(Gpt2Vocab, LoadsVocabAndMerges) {
  const std::string vocab = R"({"h":0,"e":1,"l":2,"o":3,"Ġ":4,"he":5,"ll":6,"hell":7,"hello":8,"Ġhello":9,"<|endoftext|>":10,"Ġh":11,"Ġhe":12,"Ġhell":13})";
  // "Ġ hello" is needed: the Ġ h ... merges rank below the ones that build "hello" first.
  const std::string merges = "#version: 0.2\nh e\nl l\nhe ll\nhell o\nĠ h\nĠh e\nĠhe ll\nĠhell o\nĠ hello\n";
  Expected<std::unique_ptr<Tokenizer>> t = gpt2_tokenizer_from_vocab(vocab, merges);
  ASSERT_TRUE(t.has_value()) << t.status().message();
  EXPECT_EQ(*(*t)->encode("hello hello<|endoftext|>"), (Ids{8, 9, 10}));
  EXPECT_EQ(*(*t)->decode(Ids{8, 9, 10}), "hello hello<|endoftext|>");
  EXPECT_EQ(*(*t)->decode(Ids{8, 9, 10}, true), "hello hello");
  EXPECT_EQ((*t)->eos_id(), 10);
  EXPECT_TRUE((*t)->is_special(10));
  Expected<std::unique_ptr<Tokenizer>> bad = gpt2_tokenizer_from_vocab(vocab, "h e\nthree piece merge\n");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(gpt2_tokenizer_from_vocab("[]", merges).has_value());
  EXPECT_FALSE(gpt2_tokenizer_from_vocab(vocab, "h z\n").has_value());
}

// A tiny tiktoken file: the bytes a b c and space, then "ab" (4), "abc" (5), " a" (6).
const char* kTinyTiktoken = "YQ== 0\nYg== 1\nYw== 2\nIA== 3\nYWI= 4\nYWJj 5\nIGE= 6\n";

TEST(Tiktoken, MergesByLowestRankAndSplitsSpecials) {
  Expected<std::unique_ptr<Tokenizer>> t = tiktoken_tokenizer(kTinyTiktoken, "\\s?\\p{L}+|\\s+", {{"<|end|>", 7}});
  ASSERT_TRUE(t.has_value()) << t.status().message();
  // " abcab": both "ab" pairs merge first (rank 4, leftmost first), then ab + c -> abc (5).
  EXPECT_EQ(*(*t)->encode("abc abcab"), (Ids{5, 3, 5, 4}));
  EXPECT_EQ(*(*t)->encode("ab<|end|>c"), (Ids{4, 7, 2}));
  EXPECT_EQ(*(*t)->decode(Ids{5, 6, 7}), "abc a<|end|>");
  EXPECT_EQ(*(*t)->decode(Ids{5, 6, 7}, true), "abc a");
  EXPECT_FALSE((*t)->decode(Ids{8}).has_value());
  EXPECT_EQ((*t)->vocab_size(), 8);
  EXPECT_TRUE((*t)->is_special(7));
  // A character with no byte rank is an error, not a crash.
  Expected<Ids> missing = (*t)->encode("d");
  ASSERT_FALSE(missing.has_value());
  // Invalid UTF-8 becomes U+FFFD, which this pattern does not match: only matches are encoded.
  EXPECT_EQ(*(*t)->encode("a\xFF"), (Ids{0}));
}

TEST(Tiktoken, MalformedFilesAreErrors) {
  EXPECT_FALSE(tiktoken_tokenizer("", "\\s+", {}).has_value());
  EXPECT_FALSE(tiktoken_tokenizer("YQ==\n", "\\s+", {}).has_value());
  EXPECT_FALSE(tiktoken_tokenizer("Y!== 0\n", "\\s+", {}).has_value());
  EXPECT_FALSE(tiktoken_tokenizer("YQ== x\n", "\\s+", {}).has_value());
  EXPECT_FALSE(tiktoken_tokenizer("YQ== 0\nYQ== 1\n", "\\s+", {}).has_value());
  Expected<std::unique_ptr<Tokenizer>> bad_pattern = tiktoken_tokenizer("YQ== 0\n", "(", {});
  ASSERT_FALSE(bad_pattern.has_value());
  EXPECT_NE(bad_pattern.status().message().find("pattern"), std::string::npos);
  EXPECT_EQ(tiktoken_cl100k_special_tokens().at("<|endoftext|>"), 100257);
  EXPECT_EQ(tiktoken_o200k_special_tokens().at("<|endofprompt|>"), 200018);
}

}  // namespace
}  // namespace kiln::llm
