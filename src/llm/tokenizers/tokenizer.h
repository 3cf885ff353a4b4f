// Tokenizer: text <-> token ids, exactly as the model's reference tokenizer does it. One interface
// over the formats a model directory can carry:
//   tokenizer.json          Hugging Face tokenizers (BPE: byte-level or SentencePiece-style with
//                           byte fallback; normalizers, pre-tokenizers, post-processors, decoders,
//                           added and special tokens)
//   tokenizer.model         SentencePiece model (through libsentencepiece)
//   vocab.json + merges.txt GPT-2 style byte-level BPE
// The same files are copied into engines at build time, so every front end loads a tokenizer
// from a name -> contents map (tokenizer_from_files), whether from a directory or an engine.
// A Tokenizer is immutable after loading and safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kiln::llm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`. With add_special_tokens, the post-processor's BOS/EOS (or the
  // SentencePiece model's BOS) are added as the reference does. Invalid UTF-8 in `text` is
  // handled as the reference handles it, never rejected silently by a crash.
  virtual Expected<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens = true) const = 0;

  // Text of `ids` through the decoder chain. Ids outside the vocabulary are an error.
  virtual Expected<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;

  virtual int64_t vocab_size() const = 0;                                // including added tokens
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;  // the raw vocabulary piece
  virtual bool is_special(int32_t id) const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
};

// Picks the format from the files present (tokenizer.json first, then tokenizer.model, then
// vocab.json + merges.txt); tokenizer_config.json, when present, supplies added tokens and BOS/EOS
// settings the tokenizer file lacks.
Expected<std::unique_ptr<Tokenizer>> tokenizer_from_files(const std::map<std::string, std::string>& files);

// Reads the tokenizer files of a model directory into a map for tokenizer_from_files.
Expected<std::map<std::string, std::string>> tokenizer_files_in_dir(const std::string& dir);

}  // namespace kiln::llm
