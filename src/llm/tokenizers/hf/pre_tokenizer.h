// Pre-tokenizers of the Hugging Face tokenizers library: split normalized text into the words
// the model tokenizes one at a time (ByteLevel, Split, Metaspace, Digits, Whitespace,
// WhitespaceSplit, Sequence), read from the "pre_tokenizer" object of tokenizer.json.
// Immutable after construction; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kiln::llm {

// One piece of text on its way to the model. at_origin: the piece begins at offset 0 of the
// original input (Metaspace's prepend_scheme "first" only prepends to such a piece).
struct PreTokenPiece {
  std::string text;
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece with its sub-pieces; empty pieces are dropped. Text is valid UTF-8.
  virtual void split(std::vector<PreTokenPiece>& pieces) const = 0;
};

// How the matches of a split pattern become pieces (the library's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// `where` names the JSON field for error messages. A null JSON value gives a null pointer.
Expected<std::unique_ptr<PreTokenizer>> pre_tokenizer_from_json(const nlohmann::json& json, const std::string& where);

// ByteLevel pre-tokenizer as GPT-2 uses it (for vocab.json + merges.txt tokenizers).
Expected<std::unique_ptr<PreTokenizer>> pre_tokenizer_byte_level(bool add_prefix_space, bool use_regex);

// The pre-tokenization regex of GPT-2's byte-level BPE.
inline constexpr const char* kGpt2SplitPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace kiln::llm
