#include "server/generation/served_model.h"

#include <chrono>
#include <nlohmann/json.hpp>

namespace kiln::server {

std::string ServedModel::token_text(int32_t id) const {
  auto text = tokenizer->decode(std::span<const int32_t>(&id, 1), false);
  return text ? *text : std::string();
}

Expected<ServedModel> served_model_from_files(const std::map<std::string, std::string>& files, std::string name,
                                              int64_t max_seq_len, int64_t vocab_size,
                                              const std::optional<std::string>& chat_template_source,
                                              std::optional<llm::tools::ToolCallSyntax> tool_syntax) {
  ServedModel m;
  m.name = std::move(name);
  m.max_seq_len = max_seq_len;
  m.vocab_size = vocab_size;
  m.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  KILN_ASSIGN_OR_RETURN(m.tokenizer, llm::tokenizer_from_files(files));
  m.grammars = std::make_shared<llm::structured::GrammarCache>(*m.tokenizer);
  if (auto it = files.find("generation_config.json"); it != files.end()) {
    auto defaults = llm::generation_defaults_from_json(it->second);
    if (!defaults) return defaults.status().with_context("generation_config.json");
    m.defaults = defaults->params;
    m.eos_ids = defaults->eos_token_ids;
  }
  if (m.eos_ids.empty() && m.tokenizer->eos_id()) m.eos_ids = {*m.tokenizer->eos_id()};
  // The defaults are request defaults, not a length policy: the request says how much it wants.
  m.defaults.max_tokens = 16;
  auto config = files.find("tokenizer_config.json");
  if (chat_template_source) {
    std::string bos, eos;
    if (config != files.end()) {
      // The special tokens come from the model even when the template does not.
      auto j = nlohmann::json::parse(config->second, nullptr, false);
      auto token_string = [&](const char* key) -> std::string {
        if (!j.is_object() || !j.contains(key)) return {};
        const auto& v = j[key];
        if (v.is_string()) return v.get<std::string>();
        if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
        return {};
      };
      bos = token_string("bos_token");
      eos = token_string("eos_token");
    }
    auto t = llm::ChatTemplate::compile(*chat_template_source, bos, eos);
    if (!t) return t.status().with_context("chat template");
    m.chat_template = std::move(*t);
  } else if (config != files.end() && config->second.find("\"chat_template\"") != std::string::npos) {
    auto t = llm::ChatTemplate::from_tokenizer_config(config->second);
    if (!t) return t.status().with_context("tokenizer_config.json chat_template");
    m.chat_template = std::move(*t);
  }
  m.tool_syntax = tool_syntax;
  if (!m.tool_syntax && m.chat_template) m.tool_syntax = llm::tools::detect_tool_call_syntax(m.chat_template->source());
  if (auto s = llm::validate(m.defaults, vocab_size); !s) return s.with_context("generation_config.json");
  return m;
}

}  // namespace kiln::server
