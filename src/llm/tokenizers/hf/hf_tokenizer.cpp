#include "llm/tokenizers/hf/hf_tokenizer.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "llm/tokenizers/bpe/bpe_text.h"
#include "llm/tokenizers/hf/hf_tokenizer_json.h"

namespace kiln::llm {
namespace {

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(HfTokenizerParts parts) : parts_(std::move(parts)) {
    id_limit_ = parts_.model->id_limit();
    std::vector<AddedTokenMatcher::Entry> raw, normalized;
    // The library matches special tokens first, then the others (order matters only between
    // equal patterns).
    for (int pass = 0; pass < 2; ++pass) {
      for (const HfAddedToken& token : parts_.added_tokens) {
        if (token.special != (pass == 0) || token.content.empty()) continue;
        if (token.normalized) {
          normalized.push_back({parts_.normalizer ? parts_.normalizer->normalize(token.content) : token.content, &token});
        } else {
          raw.push_back({token.content, &token});
        }
      }
    }
    raw_matcher_ = AddedTokenMatcher(std::move(raw));
    normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
    for (const HfAddedToken& token : parts_.added_tokens) {
      added_by_id_[token.id] = &token;
      added_by_content_.emplace(token.content, token.id);
      id_limit_ = std::max<int64_t>(id_limit_, int64_t{token.id} + 1);
    }
    if (!parts_.bos_id || !parts_.eos_id) {
      std::vector<int32_t> before, after;
      if (parts_.post_processor) parts_.post_processor->special_ids(before, after);
      if (!parts_.bos_id && !before.empty()) parts_.bos_id = before.front();
      if (!parts_.eos_id && !after.empty()) parts_.eos_id = after.back();
    }
    // Well-known names, for files that state neither (Llama-3, Qwen, GPT-2 without a config).
    for (const char* name : {"<|begin_of_text|>", "<s>", "<|startoftext|>"}) {
      if (parts_.bos_id) break;
      parts_.bos_id = token_to_id(name);
    }
    for (const char* name : {"<|end_of_text|>", "</s>", "<|endoftext|>"}) {
      if (parts_.eos_id) break;
      parts_.eos_id = token_to_id(name);
    }
  }

  Expected<std::vector<int32_t>> encode(std::string_view input, bool add_special_tokens) const override {
    std::string repaired;
    std::string_view text = input;
    if (!utf8_is_valid(input)) {
      repaired = utf8_sanitize(input);
      text = repaired;
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    std::vector<PreTokenPiece> pieces;
    for (const AddedTokenMatcher::Split& raw : raw_matcher_.split(text)) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      if (raw.end == raw.start) continue;
      std::string_view segment = text.substr(raw.start, raw.end - raw.start);
      std::string normalized_text;
      if (parts_.normalizer) {
        normalized_text = parts_.normalizer->normalize(segment);
        segment = normalized_text;
      }
      for (const AddedTokenMatcher::Split& sub : normalized_matcher_.split(segment)) {
        if (sub.id >= 0) {
          ids.push_back(sub.id);
          continue;
        }
        if (sub.end == sub.start) continue;
        pieces.clear();
        pieces.push_back({std::string(segment.substr(sub.start, sub.end - sub.start)), raw.start == 0 && sub.start == 0});
        if (parts_.pre_tokenizer) parts_.pre_tokenizer->split(pieces);
        for (const PreTokenPiece& piece : pieces) parts_.model->tokenize(piece.text, ids);
      }
    }
    if (add_special_tokens && parts_.post_processor) parts_.post_processor->process(ids);
    return ids;
  }

  Expected<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
        if (skip_special_tokens && it->second->special) continue;
        tokens.push_back(it->second->content);
        continue;
      }
      std::optional<std::string_view> piece = parts_.model->id_to_token(id);
      if (!piece) {
        return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary (ids are 0.." +
                                std::to_string(id_limit_ - 1) + ")");
      }
      tokens.emplace_back(*piece);
    }
    std::string text;
    if (parts_.decoder) {
      parts_.decoder->decode_chain(tokens);
      for (const std::string& t : tokens) text += t;
    } else {
      // The library joins pieces with spaces when there is no decoder.
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) text += ' ';
        text += tokens[i];
      }
    }
    return text;
  }

  int64_t vocab_size() const override { return id_limit_; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end()) return it->second;
    return parts_.model->token_to_id(token);
  }

  std::optional<std::string> id_to_token(int32_t id) const override {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second->content;
    std::optional<std::string_view> piece = parts_.model->id_to_token(id);
    if (!piece) return std::nullopt;
    return std::string(*piece);
  }

  bool is_special(int32_t id) const override {
    auto it = added_by_id_.find(id);
    return it != added_by_id_.end() && it->second->special;
  }
  std::optional<int32_t> bos_id() const override { return parts_.bos_id; }
  std::optional<int32_t> eos_id() const override { return parts_.eos_id; }

 private:
  HfTokenizerParts parts_;
  AddedTokenMatcher raw_matcher_;
  AddedTokenMatcher normalized_matcher_;
  std::map<int32_t, const HfAddedToken*> added_by_id_;
  std::map<std::string, int32_t> added_by_content_;
  int64_t id_limit_ = 0;
};

// One entry of "added_tokens" (tokenizer.json) or "added_tokens_decoder" (tokenizer_config.json).
Expected<HfAddedToken> parse_added_token(const nlohmann::json& json, std::optional<int64_t> id, const std::string& where) {
  if (!json.is_object()) return invalid_argument(where + " must be an object");
  HfAddedToken token;
  if (!id) {
    auto it = json.find("id");
    if (it == json.end() || !it->is_number_integer()) return invalid_argument(where + ".id must be an integer");
    id = it->get<int64_t>();
  }
  if (*id < 0 || *id > INT32_MAX) return invalid_argument(where + ".id " + std::to_string(*id) + " is out of range");
  token.id = static_cast<int32_t>(*id);
  KILN_ASSIGN_OR_RETURN(token.content, hf_json_string(json, "content", where));
  KILN_ASSIGN_OR_RETURN(token.special, hf_json_bool(json, "special", false, where));
  KILN_ASSIGN_OR_RETURN(token.single_word, hf_json_bool(json, "single_word", false, where));
  KILN_ASSIGN_OR_RETURN(token.lstrip, hf_json_bool(json, "lstrip", false, where));
  KILN_ASSIGN_OR_RETURN(token.rstrip, hf_json_bool(json, "rstrip", false, where));
  KILN_ASSIGN_OR_RETURN(token.normalized, hf_json_bool(json, "normalized", !token.special, where));
  return token;
}

// "a b" or ["a", "b"].
Expected<std::pair<std::string, std::string>> parse_merge(const nlohmann::json& json, const std::string& where) {
  if (json.is_string()) {
    const std::string merge = json.get<std::string>();
    const size_t space = merge.find(' ');
    if (space == std::string::npos) return invalid_argument(where + " '" + merge + "' must be two pieces separated by a space");
    return std::make_pair(merge.substr(0, space), merge.substr(space + 1));
  }
  if (json.is_array() && json.size() == 2 && json[0].is_string() && json[1].is_string()) {
    return std::make_pair(json[0].get<std::string>(), json[1].get<std::string>());
  }
  return invalid_argument(where + " must be \"a b\" or [\"a\", \"b\"]");
}

Expected<std::optional<std::string>> optional_string(const nlohmann::json& json, const char* key, const std::string& where) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return invalid_argument(where + "." + key + " must be a string or null");
  return std::optional<std::string>(it->get<std::string>());
}

Expected<std::unique_ptr<BpeModel>> model_from_json(const nlohmann::json& json) {
  const std::string where = "model";
  if (!json.is_object()) return invalid_argument("model must be an object");
  std::string type = "BPE";
  if (auto it = json.find("type"); it != json.end()) {
    if (!it->is_string()) return invalid_argument("model.type must be a string");
    type = it->get<std::string>();
  }
  if (type != "BPE") {
    return unimplemented("model.type '" + type + "' is not supported: Kiln reads BPE tokenizer.json files (use "
                         "tokenizer.model for SentencePiece Unigram models)");
  }
  if (auto it = json.find("dropout"); it != json.end() && !it->is_null()) {
    if (!it->is_number()) return invalid_argument("model.dropout must be a number or null");
    if (it->get<double>() > 0.0) return unimplemented("model.dropout > 0 (BPE dropout) is a training feature; set it to null");
  }
  auto vocab_it = json.find("vocab");
  if (vocab_it == json.end() || !vocab_it->is_object()) return invalid_argument("model.vocab must be an object");
  BpeVocab vocab;
  vocab.reserve(vocab_it->size());
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX) {
      return invalid_argument("model.vocab[\"" + it.key() + "\"] must be a non-negative integer id");
    }
    vocab.emplace(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (auto merges_it = json.find("merges"); merges_it != json.end() && !merges_it->is_null()) {
    if (!merges_it->is_array()) return invalid_argument("model.merges must be an array");
    merges.reserve(merges_it->size());
    for (size_t i = 0; i < merges_it->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(auto merge, parse_merge((*merges_it)[i], "model.merges[" + std::to_string(i) + "]"));
      merges.push_back(std::move(merge));
    }
  }
  BpeOptions options;
  KILN_ASSIGN_OR_RETURN(options.unk_token, optional_string(json, "unk_token", where));
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> prefix, optional_string(json, "continuing_subword_prefix", where));
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> suffix, optional_string(json, "end_of_word_suffix", where));
  options.continuing_subword_prefix = prefix.value_or("");
  options.end_of_word_suffix = suffix.value_or("");
  KILN_ASSIGN_OR_RETURN(options.fuse_unk, hf_json_bool(json, "fuse_unk", false, where));
  KILN_ASSIGN_OR_RETURN(options.byte_fallback, hf_json_bool(json, "byte_fallback", false, where));
  KILN_ASSIGN_OR_RETURN(options.ignore_merges, hf_json_bool(json, "ignore_merges", false, where));
  return BpeModel::create(std::move(vocab), merges, std::move(options));
}

// "bos_token": "<s>" or {"content": "<s>", ...}.
std::optional<std::string> config_token_name(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    if (auto c = it->find("content"); c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return std::nullopt;
}

Expected<std::unique_ptr<Tokenizer>> from_json(std::string_view json_text, std::string_view config_text) {
  nlohmann::json json = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return invalid_argument("not valid JSON");
  if (!json.is_object()) return invalid_argument("the top level must be a JSON object");
  nlohmann::json config = nlohmann::json::object();
  if (!config_text.empty()) {
    config = nlohmann::json::parse(config_text, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return invalid_argument("tokenizer_config.json is not a JSON object");
    }
  }
  auto model_it = json.find("model");
  if (model_it == json.end()) return invalid_argument("model is missing");
  HfTokenizerParts parts;
  KILN_ASSIGN_OR_RETURN(parts.model, model_from_json(*model_it));
  const nlohmann::json null_json;
  auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = json.find(key);
    return it == json.end() ? null_json : *it;
  };
  KILN_ASSIGN_OR_RETURN(parts.normalizer, normalizer_from_json(field("normalizer"), "normalizer"));
  KILN_ASSIGN_OR_RETURN(parts.pre_tokenizer, pre_tokenizer_from_json(field("pre_tokenizer"), "pre_tokenizer"));
  KILN_ASSIGN_OR_RETURN(parts.post_processor, post_processor_from_json(field("post_processor"), "post_processor"));
  KILN_ASSIGN_OR_RETURN(parts.decoder, decoder_from_json(field("decoder"), "decoder"));

  std::set<int32_t> added_ids;
  if (const nlohmann::json& added = field("added_tokens"); !added.is_null()) {
    if (!added.is_array()) return invalid_argument("added_tokens must be an array");
    for (size_t i = 0; i < added.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(HfAddedToken token, parse_added_token(added[i], std::nullopt, "added_tokens[" + std::to_string(i) + "]"));
      if (!added_ids.insert(token.id).second) continue;
      parts.added_tokens.push_back(std::move(token));
    }
  }
  if (auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object()) {
    for (auto entry = it->begin(); entry != it->end(); ++entry) {
      const std::string where = "tokenizer_config.json: added_tokens_decoder[\"" + entry.key() + "\"]";
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(entry.key(), &used);
        if (used != entry.key().size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0) return invalid_argument(where + ": the key must be a token id");
      KILN_ASSIGN_OR_RETURN(HfAddedToken token, parse_added_token(entry.value(), id, where));
      if (!added_ids.insert(token.id).second) continue;
      parts.added_tokens.push_back(std::move(token));
    }
  }
  auto resolve = [&](const std::string& name) -> std::optional<int32_t> {
    for (const HfAddedToken& t : parts.added_tokens) {
      if (t.content == name) return t.id;
    }
    return parts.model->token_to_id(name);
  };
  if (auto name = config_token_name(config, "bos_token")) parts.bos_id = resolve(*name);
  if (auto name = config_token_name(config, "eos_token")) parts.eos_id = resolve(*name);
  if (!parts.post_processor) {
    std::vector<int32_t> before, after;
    if (auto it = config.find("add_bos_token"); it != config.end() && it->is_boolean() && it->get<bool>() && parts.bos_id) {
      before.push_back(*parts.bos_id);
    }
    if (auto it = config.find("add_eos_token"); it != config.end() && it->is_boolean() && it->get<bool>() && parts.eos_id) {
      after.push_back(*parts.eos_id);
    }
    if (!before.empty() || !after.empty()) parts.post_processor = post_processor_wrap(std::move(before), std::move(after));
  }
  return hf_tokenizer_from_parts(std::move(parts));
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> hf_tokenizer_from_parts(HfTokenizerParts parts) {
  if (!parts.model) return invalid_argument("a tokenizer needs a model");
  return std::unique_ptr<Tokenizer>(new HfTokenizer(std::move(parts)));
}

Expected<std::unique_ptr<Tokenizer>> hf_tokenizer_from_json(std::string_view json, std::string_view tokenizer_config_json) {
  Expected<std::unique_ptr<Tokenizer>> tokenizer = from_json(json, tokenizer_config_json);
  if (!tokenizer) return tokenizer.status().with_context("tokenizer.json");
  return tokenizer;
}

}  // namespace kiln::llm
