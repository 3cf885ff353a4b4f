// Hugging Face tokenizer.json pipelines on small hand-written files. Expected ids were checked
// against the Hugging Face tokenizers library (0.23) on the same files.
#include "llm/tokenizers/hf/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "llm/tokenizers/hf/pre_tokenizer.h"

namespace kiln::llm {
namespace {

// A SentencePiece-style BPE: Lowercase + Prepend("▁") + Replace(" " -> "▁"), byte fallback,
// fused unk, a template adding <s> ... </s>, and added tokens with lstrip/rstrip and single_word.
const char* kSpmLike = R"({"version":"1.0","added_tokens":[
 {"id":1,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
 {"id":2,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
 {"id":20,"content":"[MASK]","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":true},
 {"id":21,"content":"word","single_word":true,"lstrip":false,"rstrip":false,"normalized":true,"special":false}],
 "normalizer":{"type":"Sequence","normalizers":[{"type":"Lowercase"},{"type":"Prepend","prepend":"▁"},
   {"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
 "pre_tokenizer":null,
 "post_processor":{"type":"TemplateProcessing",
   "single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"</s>","type_id":0}}],
   "pair":[{"Sequence":{"id":"A","type_id":0}}],
   "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]},"</s>":{"id":"</s>","ids":[2],"tokens":["</s>"]}}},
 "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},
   {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},
 "model":{"type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,"end_of_word_suffix":null,
   "fuse_unk":true,"byte_fallback":true,
   "vocab":{"<unk>":0,"<s>":1,"</s>":2,"▁":3,"h":4,"e":5,"l":6,"o":7,"w":8,"r":9,"d":10,"▁h":11,"▁he":12,"ll":13,
            "llo":14,"▁hello":15,"<0xE4>":16,"<0xBD>":17,"<0xA0>":18,"<0x21>":19},
   "merges":["▁ h","▁h e","l l","ll o","▁he llo"]}})";

std::unique_ptr<Tokenizer> load(const std::string& json, const std::string& config = "") {
  Expected<std::unique_ptr<Tokenizer>> tokenizer = hf_tokenizer_from_json(json, config);
  EXPECT_TRUE(tokenizer.has_value()) << tokenizer.status().message();
  return tokenizer.has_value() ? std::move(tokenizer).value() : nullptr;
}

std::vector<int32_t> encode(const Tokenizer& t, std::string_view text, bool special = true) {
  Expected<std::vector<int32_t>> ids = t.encode(text, special);
  EXPECT_TRUE(ids.has_value()) << ids.status().message();
  return ids.has_value() ? *ids : std::vector<int32_t>{};
}

std::string decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip = false) {
  Expected<std::string> text = t.decode(ids, skip);
  EXPECT_TRUE(text.has_value()) << text.status().message();
  return text.has_value() ? *text : std::string();
}

using Ids = std::vector<int32_t>;

TEST(HfTokenizer, SentencePieceStylePipelineMatchesReference) {
  auto t = load(kSpmLike);
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "Hello"), (Ids{1, 15, 2}));
  EXPECT_EQ(encode(*t, "Hello", false), (Ids{15}));
  EXPECT_EQ(encode(*t, "HELLO world"), (Ids{1, 15, 3, 8, 7, 9, 6, 10, 2}));
  EXPECT_EQ(decode(*t, {1, 15, 3, 8, 7, 9, 6, 10, 2}), "<s> hello world</s>");
  EXPECT_EQ(decode(*t, {1, 15, 3, 8, 7, 9, 6, 10, 2}, true), "hello world");
  // Byte fallback: 你 is <0xE4><0xBD><0xA0>, '!' is <0x21>; they decode back to text.
  EXPECT_EQ(encode(*t, "hello 你!"), (Ids{1, 15, 3, 16, 17, 18, 19, 2}));
  EXPECT_EQ(decode(*t, {1, 15, 3, 16, 17, 18, 19, 2}, true), "hello 你!");
  // Unknown characters without a byte token fuse into one <unk>.
  EXPECT_EQ(encode(*t, "xyz hello"), (Ids{1, 3, 0, 15, 2}));
  // The empty string still gets the template's special tokens.
  EXPECT_EQ(encode(*t, ""), (Ids{1, 2}));
  EXPECT_EQ(encode(*t, "", false), Ids{});
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->vocab_size(), 22);
}

TEST(HfTokenizer, AddedTokenOptionsMatchReference) {
  auto t = load(kSpmLike);
  ASSERT_TRUE(t);
  // lstrip/rstrip: [MASK] swallows the spaces around it.
  EXPECT_EQ(encode(*t, "a [MASK]  b"), (Ids{1, 3, 0, 20, 3, 0, 2}));
  EXPECT_EQ(decode(*t, {1, 3, 0, 20, 3, 0, 2}), "<s> <unk>[MASK] <unk></s>");
  EXPECT_EQ(decode(*t, {1, 3, 0, 20, 3, 0, 2}, true), "<unk> <unk>");
  // "word" is normalized (its pattern is "▁word") and single_word: only whole words match.
  EXPECT_EQ(encode(*t, "Word"), (Ids{1, 21, 2}));
  EXPECT_EQ(encode(*t, "words word sword word.", false),
            (Ids{3, 8, 7, 9, 10, 0, 3, 8, 7, 9, 10, 3, 0, 8, 7, 9, 10, 3, 8, 7, 9, 10, 0}));
  // Special tokens in the text are recognized also without add_special_tokens, never split.
  EXPECT_EQ(encode(*t, "<s>hello</s>", false), (Ids{1, 15, 2}));
  EXPECT_TRUE(t->is_special(1));
  EXPECT_FALSE(t->is_special(21));
  EXPECT_EQ(t->token_to_id("[MASK]"), 20);
  EXPECT_EQ(t->id_to_token(15), "▁hello");
}

// A byte-level BPE (GPT-2 style) with overlapping added tokens: the longest match wins.
std::string byte_level_json(const std::string& extra_added = "") {
  return R"({"added_tokens":[
   {"id":12,"content":"<|a|>","special":true,"normalized":false},
   {"id":13,"content":"<|a|><|b|>","special":true,"normalized":false},
   {"id":14,"content":"<|b|>","special":false,"normalized":false})" + extra_added + R"(],
   "normalizer":{"type":"NFC"},
   "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},
   "post_processor":{"type":"ByteLevel"},
   "decoder":{"type":"ByteLevel"},
   "model":{"type":"BPE","vocab":{"a":0,"b":1,"Ġ":2,"Ġa":3,"ab":4,"Ã":5,"©":6,"Ã©":7,"ï":8,"¿":9,"½":10,"Ġb":11},
            "merges":[["Ġ","a"],["a","b"],["Ã","©"],["Ġ","b"]]}})";
}

TEST(HfTokenizer, ByteLevelAndLongestAddedToken) {
  auto t = load(byte_level_json());
  ASSERT_TRUE(t);
  EXPECT_EQ(encode(*t, "ab a"), (Ids{4, 3}));
  // Leftmost-longest: "<|a|><|b|>" beats "<|a|>". x and y have no piece and no unk: dropped.
  EXPECT_EQ(encode(*t, "x<|a|><|b|>y<|a|>b<|b|>"), (Ids{13, 12, 1, 14}));
  EXPECT_EQ(encode(*t, "<|a|><|b|>b<|a|>b<|b|>"), (Ids{13, 1, 12, 1, 14}));
  // NFC: e + U+0301 is é (bytes C3 A9 -> "Ã©").
  EXPECT_EQ(encode(*t, "e\xCC\x81"), (Ids{7}));
  EXPECT_EQ(encode(*t, "\xC3\xA9"), (Ids{7}));
  EXPECT_EQ(decode(*t, {7, 2, 3, 13}), "\xC3\xA9  a<|a|><|b|>");
  EXPECT_EQ(decode(*t, {7, 2, 3, 13}, true), "\xC3\xA9  a");
  EXPECT_EQ(decode(*t, {7, 13, 14}, true), "\xC3\xA9<|b|>");
  // None of the well-known BOS names exist here.
  EXPECT_EQ(t->bos_id(), std::nullopt);
}

TEST(HfTokenizer, InvalidUtf8IsReplacedNotRejected) {
  auto t = load(byte_level_json());
  ASSERT_TRUE(t);
  // U+FFFD is EF BF BD -> "ï¿½" in the byte-level alphabet.
  EXPECT_EQ(encode(*t, "\xFF"), (Ids{8, 9, 10}));
  EXPECT_EQ(encode(*t, "a\xE4\xBD"), (Ids{0, 8, 9, 10}));  // a truncated sequence is one U+FFFD
  EXPECT_EQ(encode(*t, "\xC0\x80"), (Ids{8, 9, 10, 8, 9, 10}));
  // Decoding bytes that are not UTF-8 gives U+FFFD, never invalid output.
  EXPECT_EQ(decode(*t, {5}), "\xEF\xBF\xBD");
  auto spm = load(kSpmLike);
  ASSERT_TRUE(spm);
  EXPECT_EQ(decode(*spm, {16, 17}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(encode(*spm, "\xF5", false), (Ids{3, 0}));
}

TEST(HfTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  auto t = load(kSpmLike);
  ASSERT_TRUE(t);
  for (int32_t id : {-1, 22, 1000000}) {
    Expected<std::string> text = t->decode(std::vector<int32_t>{15, id});
    ASSERT_FALSE(text.has_value());
    EXPECT_NE(text.status().message().find(std::to_string(id)), std::string::npos) << text.status().message();
  }
}

TEST(HfTokenizer, TokenizerConfigAddsTokensAndBos) {
  const std::string config = R"({"added_tokens_decoder":{"30":{"content":"<|extra|>","special":true}},
    "bos_token":{"content":"<|a|>"},"eos_token":"<|b|>","add_bos_token":true})";
  auto t = load(byte_level_json(), config);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bos_id(), 12);
  EXPECT_EQ(t->eos_id(), 14);
  EXPECT_EQ(t->vocab_size(), 31);
  // tokenizer.json has a (ByteLevel) post-processor, so add_bos_token does not apply.
  EXPECT_EQ(encode(*t, "a<|extra|>"), (Ids{0, 30}));
  EXPECT_TRUE(t->is_special(30));
}

TEST(HfTokenizer, MalformedFilesGiveErrorsNamingTheField) {
  struct Case {
    std::string json;
    std::string expected_in_message;
  };
  const std::vector<Case> cases = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "top level"},
      {R"({"normalizer": null})", "model is missing"},
      {R"({"model": {"type": "WordPiece", "vocab": {}}})", "model.type 'WordPiece'"},
      {R"({"model": {"type": "BPE", "vocab": []}})", "model.vocab"},
      {R"({"model": {"type": "BPE", "vocab": {"a": -1}}})", "model.vocab[\"a\"]"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})", "model.merges[0]"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "model.merges[0]: 'b'"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", "merged piece 'ab'"},
      {R"({"model": {"vocab": {}}, "normalizer": {"type": "Bogus"}})", "normalizer.type 'Bogus'"},
      {R"({"model": {"vocab": {}}, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Replace",
          "pattern": {"Regex": "(unclosed"}, "content": ""}]}})", "normalizer.normalizers[0].pattern"},
      {R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
          "behavior": "Sideways"}})", "pre_tokenizer.behavior 'Sideways'"},
      {R"({"model": {"vocab": {}}, "pre_tokenizer": {"type": "Metaspace", "replacement": "ab"}})",
       "pre_tokenizer.replacement"},
      {R"({"model": {"vocab": {}}, "decoder": {"type": "Strip", "content": " ", "start": -1}})", "decoder.start"},
      {R"({"model": {"vocab": {}}, "post_processor": {"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]}})",
       "post_processor.special_tokens[\"<s>\"]"},
      {R"({"model": {"vocab": {}}, "added_tokens": [{"id": 3}]})", "added_tokens[0].content"},
      {R"({"model": {"vocab": {}}, "added_tokens": [{"id": 3, "content": "x", "special": "yes"}]})",
       "added_tokens[0].special"},
  };
  for (const Case& c : cases) {
    Expected<std::unique_ptr<Tokenizer>> t = hf_tokenizer_from_json(c.json, "");
    ASSERT_FALSE(t.has_value()) << c.json;
    EXPECT_NE(t.status().message().find(c.expected_in_message), std::string::npos)
        << "message: " << t.status().message() << "\nwanted: " << c.expected_in_message;
    EXPECT_EQ(t.status().message().rfind("tokenizer.json: ", 0), 0u) << t.status().message();
  }
  EXPECT_FALSE(hf_tokenizer_from_json(kSpmLike, "{not json").has_value());
}

std::vector<std::string> pre_tokenize(const std::string& json, const std::string& text) {
  Expected<std::unique_ptr<PreTokenizer>> p = pre_tokenizer_from_json(nlohmann::json::parse(json), "pre_tokenizer");
  EXPECT_TRUE(p.has_value()) << p.status().message();
  if (!p.has_value()) return {};
  std::vector<PreTokenPiece> pieces{{text, true}};
  (*p)->split(pieces);
  std::vector<std::string> out;
  for (const PreTokenPiece& piece : pieces) out.push_back(piece.text);
  return out;
}

using Strings = std::vector<std::string>;

TEST(HfPreTokenizer, SplitBehaviorsMatchReference) {
  auto split = [](const std::string& behavior, bool invert = false) {
    return R"({"type":"Split","pattern":{"String":" "},"behavior":")" + behavior +
           R"(","invert":)" + (invert ? "true" : "false") + "}";
  };
  EXPECT_EQ(pre_tokenize(split("Removed"), "a  b c "), (Strings{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize(split("Isolated"), "a  b c "), (Strings{"a", " ", " ", "b", " ", "c", " "}));
  EXPECT_EQ(pre_tokenize(split("MergedWithPrevious"), "a  b c "), (Strings{"a ", " ", "b ", "c "}));
  EXPECT_EQ(pre_tokenize(split("MergedWithNext"), "a  b c "), (Strings{"a", " ", " b", " c", " "}));
  EXPECT_EQ(pre_tokenize(split("Contiguous"), "a  b c "), (Strings{"a", "  ", "b", " ", "c", " "}));
  EXPECT_EQ(pre_tokenize(split("Isolated", true), "a  b"), (Strings{"a", " ", " ", "b"}));
}

TEST(HfPreTokenizer, OtherPreTokenizersMatchReference) {
  EXPECT_EQ(pre_tokenize(R"({"type":"Digits","individual_digits":true})", "ab123c45"),
            (Strings{"ab", "1", "2", "3", "c", "4", "5"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Digits","individual_digits":false})", "ab123c45"),
            (Strings{"ab", "123", "c", "45"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})",
                         "Hey  friend"),
            (Strings{"▁Hey", "▁", "▁friend"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Whitespace"})", "Hey, you!! ok"), (Strings{"Hey", ",", "you", "!!", "ok"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"WhitespaceSplit"})", " Hey,\tyou!! "), (Strings{"Hey,", "you!!"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":true})", "I'm  here"),
            (Strings{"ĠI", "'m", "Ġ", "Ġhere"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},
                            {"type":"Digits","individual_digits":true}]})", "a12 b"),
            (Strings{"a", "1", "2", "b"}));
}

TEST(HfTokenizer, SharedAcrossThreadsGivesTheSameIds) {
  auto t = load(kSpmLike);
  ASSERT_TRUE(t);
  const std::vector<std::string> texts = {"Hello world", "hello 你!", "a [MASK]  b", "Word words"};
  std::vector<Ids> expected;
  for (const auto& s : texts) expected.push_back(encode(*t, s));
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) {
        const size_t j = static_cast<size_t>(i + k) % texts.size();
        Expected<Ids> ids = t->encode(texts[j]);
        if (!ids.has_value() || *ids != expected[j]) ++failures[static_cast<size_t>(k)];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace kiln::llm
