// Token decoders of the Hugging Face tokenizers library: turn the vocabulary pieces of a list of
// ids back into text (ByteLevel, ByteFallback, Metaspace, Fuse, Strip, Replace, Sequence), read
// from the "decoder" object of tokenizer.json. Immutable after construction; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kiln::llm {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // Rewrites the list of token strings; the decoded text is their concatenation at the end of
  // the chain. Strings may hold bytes that are not UTF-8 only between ByteLevel-style steps.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// `where` names the JSON field for error messages. A null JSON value gives a null pointer.
Expected<std::unique_ptr<TokenDecoder>> decoder_from_json(const nlohmann::json& json, const std::string& where);

// The byte-level decoder (GPT-2): characters map back to bytes, invalid UTF-8 becomes U+FFFD.
std::unique_ptr<TokenDecoder> decoder_byte_level();

// UTF-8 of `bytes` with each maximal invalid subsequence replaced by U+FFFD.
std::string decoder_utf8_lossy(std::string_view bytes);

}  // namespace kiln::llm
