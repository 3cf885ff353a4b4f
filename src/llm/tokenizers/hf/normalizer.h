// Normalizers of the Hugging Face tokenizers library: text -> text before pre-tokenization
// (NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Prepend, Replace, Sequence), read from the
// "normalizer" object of tokenizer.json. Immutable after construction; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kiln::llm {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8; so is the result.
  virtual std::string normalize(std::string_view text) const = 0;
};

// `where` names the JSON field for error messages ("normalizer", "normalizer.normalizers[2]").
// A null JSON value gives a null pointer (no normalizer).
Expected<std::unique_ptr<Normalizer>> normalizer_from_json(const nlohmann::json& json, const std::string& where);

}  // namespace kiln::llm
