#include "llm/tokenizers/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/tokenizers/tokenizer_formats.h"

namespace kiln::llm {
namespace {

// U+2581, SentencePiece's visible space.
constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";

Status invalid_model(const std::string& what) {
  return invalid_argument("tokenizer.model: " + what + " (expected a SentencePiece model file)");
}

// A string setting of tokenizer_config.json: "text", {"content": "text"} or null.
Expected<std::optional<std::string>> token_setting(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return std::optional<std::string>(content->get<std::string>());
  }
  return invalid_argument(std::string("tokenizer_config.json: '") + key +
                          "' must be a string or an object with a string 'content'");
}

Expected<std::optional<bool>> bool_setting(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) {
    return invalid_argument(std::string("tokenizer_config.json: '") + key + "' must be true or false");
  }
  return std::optional<bool>(it->get<bool>());
}

}  // namespace

Expected<SentencePieceOptions> sentencepiece_options_from_config(std::string_view json) {
  SentencePieceOptions options;
  if (json.empty()) return options;
  const nlohmann::json config = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return invalid_argument("tokenizer_config.json is not a JSON object");
  }
  KILN_ASSIGN_OR_RETURN(std::optional<bool> add_bos, bool_setting(config, "add_bos_token"));
  KILN_ASSIGN_OR_RETURN(std::optional<bool> add_eos, bool_setting(config, "add_eos_token"));
  KILN_ASSIGN_OR_RETURN(std::optional<bool> prefix_space, bool_setting(config, "add_prefix_space"));
  if (add_bos) options.add_bos = *add_bos;
  if (add_eos) options.add_eos = *add_eos;
  if (prefix_space && !*prefix_space) {
    return unimplemented(
        "tokenizer_config.json sets add_prefix_space to false, which Kiln does not support for a "
        "tokenizer.model; give the model directory a tokenizer.json");
  }
  KILN_ASSIGN_OR_RETURN(options.bos_token, token_setting(config, "bos_token"));
  KILN_ASSIGN_OR_RETURN(options.eos_token, token_setting(config, "eos_token"));
  auto added = config.find("added_tokens_decoder");
  if (added != config.end() && !added->is_null()) {
    if (!added->is_object()) return invalid_argument("tokenizer_config.json: 'added_tokens_decoder' must be an object");
    for (const auto& [key, token] : added->items()) {
      int32_t id = -1;
      try {
        size_t used = 0;
        const long long v = std::stoll(key, &used);
        if (used == key.size() && v >= 0 && v <= INT32_MAX) id = static_cast<int32_t>(v);
      } catch (const std::exception&) {
      }
      auto content = token.is_object() ? token.find("content") : token.end();
      if (id < 0 || content == token.end() || !content->is_string()) {
        return invalid_argument("tokenizer_config.json: added_tokens_decoder entry '" + key +
                                "' needs a token id as key and a string 'content'");
      }
      options.added_tokens.emplace_back(id, content->get<std::string>());
    }
  }
  return options;
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Expected<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(std::string_view model_bytes,
                                                                               const SentencePieceOptions& options) {
  if (model_bytes.empty()) return invalid_model("the file is empty");
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = t->sp_->LoadFromSerializedProto(absl::string_view(model_bytes.data(), model_bytes.size()));
  if (!st.ok()) return invalid_model(st.ToString());
  const sentencepiece::SentencePieceProcessor& sp = *t->sp_;
  const int size = sp.GetPieceSize();
  if (size <= 0) return invalid_model("the model has no pieces");
  t->options_ = options;

  auto piece_id = [&](const std::optional<std::string>& piece, int model_id,
                      const char* what) -> Expected<std::optional<int32_t>> {
    if (piece) {
      std::optional<int32_t> id = t->token_to_id(*piece);
      if (!id) {
        return invalid_argument(std::string("tokenizer_config.json: ") + what + " '" + *piece +
                                "' is not a piece of tokenizer.model");
      }
      return id;
    }
    if (model_id >= 0 && model_id < size) return std::optional<int32_t>(model_id);
    return std::optional<int32_t>();
  };
  KILN_ASSIGN_OR_RETURN(t->bos_id_, piece_id(options.bos_token, sp.bos_id(), "bos_token"));
  KILN_ASSIGN_OR_RETURN(t->eos_id_, piece_id(options.eos_token, sp.eos_id(), "eos_token"));
  if (options.add_bos && !t->bos_id_) {
    return invalid_argument("tokenizer.model has no BOS piece, but tokenizer_config.json asks to add one");
  }
  if (options.add_eos && !t->eos_id_) {
    return invalid_argument("tokenizer.model has no EOS piece, but tokenizer_config.json asks to add one");
  }
  for (const auto& [id, content] : options.added_tokens) {
    if (id >= size || sp.IdToPiece(id) != content) {
      return unimplemented("tokenizer_config.json adds token '" + content + "' (id " + std::to_string(id) +
                           "), which tokenizer.model lacks; Kiln supports added tokens through tokenizer.json: "
                           "give the model directory one");
    }
  }

  // Find out whether decoding drops the space of a leading "▁" from any ordinary piece.
  for (int id = 0; id < size; ++id) {
    const std::string& piece = sp.IdToPiece(id);
    if (sp.IsControl(id) || sp.IsUnknown(id) || sp.IsByte(id) || sp.IsUnused(id)) continue;
    if (piece.size() <= kSpaceSymbol.size() || piece.rfind(kSpaceSymbol, 0) != 0) continue;
    std::string text;
    if (!sp.Decode(std::vector<int>{id}, &text).ok()) continue;
    size_t spaces = 0;  // "▁" symbols in the piece, each of which becomes one space
    for (size_t at = piece.find(kSpaceSymbol); at != std::string::npos; at = piece.find(kSpaceSymbol, at + 1)) ++spaces;
    t->strips_leading_space_ = text.size() + 1 == piece.size() - spaces * (kSpaceSymbol.size() - 1);
    break;
  }
  return t;
}

Expected<std::vector<int32_t>> SentencePieceTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int> pieces;
  const auto st = sp_->Encode(absl::string_view(text.data(), text.size()), &pieces);
  if (!st.ok()) return invalid_argument("cannot tokenize the text: " + st.ToString());
  std::vector<int32_t> ids;
  ids.reserve(pieces.size() + 2);
  if (add_special_tokens && options_.add_bos) ids.push_back(*bos_id_);
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  if (add_special_tokens && options_.add_eos) ids.push_back(*eos_id_);
  return ids;
}

Expected<std::string> SentencePieceTokenizer::decode_pieces(const std::vector<int>& ids) const {
  std::string text;
  const auto st = sp_->Decode(ids, &text);
  if (!st.ok()) return invalid_argument("cannot decode token ids: " + st.ToString());
  return text;
}

Expected<std::string> SentencePieceTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const int size = sp_->GetPieceSize();
  for (int32_t id : ids) {
    if (id < 0 || id >= size) {
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                              std::to_string(size) + " tokens)");
    }
  }
  if (skip_special_tokens) return decode_pieces(std::vector<int>(ids.begin(), ids.end()));

  // Runs of ordinary pieces go through SentencePiece; control tokens between them appear as
  // their piece text. A run after such text keeps the space of its leading "▁", which
  // SentencePiece would drop as if the run began the text.
  std::string out;
  std::vector<int> run;
  auto flush = [&]() -> Status {
    if (run.empty()) return Status::ok();
    KILN_ASSIGN_OR_RETURN(std::string text, decode_pieces(run));
    const int first = run.front();
    if (!out.empty() && strips_leading_space_ && !sp_->IsByte(first) && !sp_->IsUnknown(first) &&
        sp_->IdToPiece(first).rfind(kSpaceSymbol, 0) == 0) {
      out += ' ';
    }
    out += text;
    run.clear();
    return Status::ok();
  };
  for (int32_t id : ids) {
    if (sp_->IsControl(id)) {
      KILN_RETURN_IF_ERROR(flush());
      out += sp_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  KILN_RETURN_IF_ERROR(flush());
  return out;
}

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::optional<int32_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = sp_->PieceToId(absl::string_view(token.data(), token.size()));
  if (id < 0 || id >= sp_->GetPieceSize() || sp_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

std::optional<std::string> SentencePieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize()) return std::nullopt;
  return sp_->IdToPiece(id);
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < sp_->GetPieceSize() && sp_->IsControl(id);
}

Expected<std::unique_ptr<Tokenizer>> sentencepiece_tokenizer_from_model(std::string_view model,
                                                                        std::string_view tokenizer_config_json) {
  KILN_ASSIGN_OR_RETURN(SentencePieceOptions options, sentencepiece_options_from_config(tokenizer_config_json));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> t, SentencePieceTokenizer::load(model, options));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace kiln::llm
