// Loader for GPT-2 style byte-level BPE files: vocab.json (piece -> id, pieces spelled in the
// byte-level alphabet) and merges.txt (one "a b" merge per line, highest priority first, an
// optional "#version" first line). The result behaves like the Hugging Face library's BPE model
// with a ByteLevel pre-tokenizer (GPT-2 regex, no prefix space) and ByteLevel decoder;
// "<|endoftext|>", when in the vocabulary, is a special token (BOS and EOS).
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"
#include "llm/tokenizers/tokenizer.h"

namespace kiln::llm {

Expected<std::unique_ptr<Tokenizer>> gpt2_tokenizer_from_vocab(std::string_view vocab_json, std::string_view merges_txt);

}  // namespace kiln::llm
