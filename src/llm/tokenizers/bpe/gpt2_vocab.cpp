#include "llm/tokenizers/bpe/gpt2_vocab.h"

#include <nlohmann/json.hpp>

#include "llm/tokenizers/hf/hf_tokenizer.h"

namespace kiln::llm {

Expected<std::unique_ptr<Tokenizer>> gpt2_tokenizer_from_vocab(std::string_view vocab_json, std::string_view merges_txt) {
  nlohmann::json vocab_doc = nlohmann::json::parse(vocab_json, nullptr, /*allow_exceptions=*/false);
  if (vocab_doc.is_discarded() || !vocab_doc.is_object()) {
    return invalid_argument("vocab.json must be a JSON object of piece -> id");
  }
  BpeVocab vocab;
  vocab.reserve(vocab_doc.size());
  for (auto it = vocab_doc.begin(); it != vocab_doc.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX) {
      return invalid_argument("vocab.json: \"" + it.key() + "\" must map to a non-negative integer id");
    }
    vocab.emplace(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < merges_txt.size()) {
    size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return invalid_argument("merges.txt line " + std::to_string(line_no) + ": expected two pieces separated by one space");
    }
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  HfTokenizerParts parts;
  Expected<std::unique_ptr<BpeModel>> model = BpeModel::create(std::move(vocab), merges, BpeOptions{});
  if (!model) return model.status().with_context("vocab.json + merges.txt");
  parts.model = std::move(model).value();
  KILN_ASSIGN_OR_RETURN(parts.pre_tokenizer, pre_tokenizer_byte_level(/*add_prefix_space=*/false, /*use_regex=*/true));
  parts.decoder = decoder_byte_level();
  if (std::optional<int32_t> eot = parts.model->token_to_id("<|endoftext|>")) {
    HfAddedToken token;
    token.id = *eot;
    token.content = "<|endoftext|>";
    token.special = true;
    parts.added_tokens.push_back(token);
    parts.bos_id = *eot;
    parts.eos_id = *eot;
  }
  return hf_tokenizer_from_parts(std::move(parts));
}

}  // namespace kiln::llm
