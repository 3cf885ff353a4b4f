// Added tokens of a Hugging Face tokenizer (the "added_tokens" of tokenizer.json: special tokens
// such as <|im_start|> and extra words) and the matcher that finds them in text before the
// normalizer and pre-tokenizer run, so they are never split. Matching follows the library:
// leftmost-longest over all tokens of one kind, then single_word / lstrip / rstrip applied to
// each match. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::llm {

struct HfAddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in normalized text (else in the raw input)
};

class AddedTokenMatcher {
 public:
  struct Entry {
    std::string pattern;  // the text to find (the normalized content for normalized tokens)
    const HfAddedToken* token;
  };
  AddedTokenMatcher() = default;
  // `entries` in the library's order (special tokens first, then the others). The tokens must
  // outlive the matcher.
  explicit AddedTokenMatcher(std::vector<Entry> entries);

  struct Split {
    size_t start;
    size_t end;
    int32_t id;  // -1: ordinary text
  };
  // Splits of `text` (covering it in order): ordinary text and matched added tokens. An empty
  // text gives one empty split.
  std::vector<Split> split(std::string_view text) const;
  bool empty() const { return entries_.empty(); }

 private:
  std::vector<Entry> entries_;
  // Byte trie: (node << 8 | byte) -> child node; node -> entry index ending there.
  std::unordered_map<uint64_t, int32_t> edges_;
  std::unordered_map<int32_t, int32_t> terminal_;
  bool first_byte_[256] = {};
};

}  // namespace kiln::llm
