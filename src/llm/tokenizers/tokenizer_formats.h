// The constructors of each tokenizer format, one per kind of file a model directory can carry.
// tokenizer_from_files (tokenizer_factory.cpp) picks one from the files present; front ends call
// that, not these. Each constructor parses the file contents it is given (it keeps no reference
// to them), validates them once, and returns an immutable Tokenizer or an error naming the file
// and the problem.
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"
#include "llm/tokenizers/tokenizer.h"

namespace kiln::llm {

// Hugging Face tokenizers' tokenizer.json; `tokenizer_config_json` is the contents of
// tokenizer_config.json, or empty when the model has none.
Expected<std::unique_ptr<Tokenizer>> hf_tokenizer_from_json(std::string_view json,
                                                            std::string_view tokenizer_config_json);

// GPT-2 style byte-level BPE from vocab.json and merges.txt.
Expected<std::unique_ptr<Tokenizer>> gpt2_tokenizer_from_vocab(std::string_view vocab_json,
                                                               std::string_view merges_txt);

// A SentencePiece tokenizer.model (see sentencepiece_tokenizer.h); `tokenizer_config_json` as
// for hf_tokenizer_from_json.
Expected<std::unique_ptr<Tokenizer>> sentencepiece_tokenizer_from_model(std::string_view model,
                                                                        std::string_view tokenizer_config_json);

}  // namespace kiln::llm
