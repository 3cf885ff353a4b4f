// SentencePieceTokenizer: a SentencePiece `tokenizer.model` (Llama-2, Mistral, Baichuan, ...)
// behind the Tokenizer interface, through Debian's libsentencepiece, so that ids are exactly
// those of the reference implementation.
//
//   encode   SentencePiece's own encoding (normaliser, dummy prefix, byte fallback), then BOS in
//            front and EOS at the end when add_special_tokens and the options ask for them, as
//            Hugging Face's slow LlamaTokenizer does. Text that looks like a control token
//            ("<s>") is encoded as text, never as the control id.
//   decode   with skip_special_tokens: exactly SentencePiece's decoding (control tokens vanish,
//            <unk> becomes " ⁇ ", byte pieces are joined into UTF-8 and each byte of an invalid
//            or incomplete sequence becomes U+FFFD, the dummy-prefix space of the first piece
//            is removed). Without it, control tokens appear as their piece text and only the
//            very start of the text loses its dummy-prefix space ("<s>", "▁Hi" -> "<s> Hi"), as
//            the Hugging Face fast tokenizer of the same model decodes.
//   special  the control tokens (<s>, </s>, ...). <unk> is an ordinary piece here.
//
// The tokenizer owns its parsed model; it keeps no reference to the bytes it was loaded from.
// Immutable after loading and safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "llm/tokenizers/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace kiln::llm {

struct SentencePieceOptions {
  bool add_bos = true;   // tokenizer_config.json's add_bos_token (Llama's default)
  bool add_eos = false;  // tokenizer_config.json's add_eos_token
  // Pieces that replace the model's own BOS / EOS ids (tokenizer_config.json's bos_token and
  // eos_token); each must be a piece of the model.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // Added tokens the config declares, as (id, content). A SentencePiece model can only carry
  // tokens it already has: each must be that piece of the model (Llama-2 lists <unk>, <s>, </s>).
  std::vector<std::pair<int32_t, std::string>> added_tokens;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Parses a serialized ModelProto (the bytes of tokenizer.model). Malformed bytes, a model
  // without pieces, or an option naming a piece the model lacks are invalid_argument errors.
  static Expected<std::unique_ptr<SentencePieceTokenizer>> load(std::string_view model_bytes,
                                                                const SentencePieceOptions& options = {});
  ~SentencePieceTokenizer() override;

  Expected<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens = true) const override;
  Expected<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }

  const SentencePieceOptions& options() const { return options_; }

 private:
  SentencePieceTokenizer() = default;
  // SentencePiece's decoding of `ids`, which hold no control token.
  Expected<std::string> decode_pieces(const std::vector<int>& ids) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  SentencePieceOptions options_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  // Whether decoding removes the space of a leading "▁" (models with a dummy prefix or with
  // extra whitespace removal); decode() puts it back after a control token's text.
  bool strips_leading_space_ = false;
};

// tokenizer_config.json's settings for a SentencePiece model: add_bos_token, add_eos_token,
// bos_token, eos_token (a string or {"content": ...}), added_tokens_decoder. `json` empty means
// defaults. Settings this tokenizer cannot honour (add_prefix_space false) are unimplemented errors.
Expected<SentencePieceOptions> sentencepiece_options_from_config(std::string_view json);

}  // namespace kiln::llm
