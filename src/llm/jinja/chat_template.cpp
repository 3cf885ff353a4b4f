#include "llm/jinja/chat_template.h"

#include "llm/jinja/jinja_parser.h"
#include "llm/jinja/jinja_render.h"

namespace kiln::llm {
namespace {

constexpr int kMaxJsonDepth = 256;

bool json_depth_ok(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxJsonDepth) return false;
  if (json.is_array() || json.is_object()) {
    for (const auto& item : json) {
      if (!json_depth_ok(item, depth + 1)) return false;
    }
  }
  return true;
}

// A special token in tokenizer_config.json: a string, null, or an AddedToken object {"content": ...}.
std::optional<std::string> token_text(const nlohmann::ordered_json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::compile_with(std::string_view source, SpecialTokens special_tokens) {
  KILN_ASSIGN_OR_RETURN(jinja::Body body, jinja::parse_template(source));
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(source);
  t.program_ = std::make_shared<const jinja::Body>(std::move(body));
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

Expected<ChatTemplate> ChatTemplate::compile(std::string_view source, std::string bos_token, std::string eos_token) {
  return compile_with(source, {{"bos_token", std::move(bos_token)}, {"eos_token", std::move(eos_token)}});
}

Expected<ChatTemplate> ChatTemplate::from_tokenizer_config(std::string_view tokenizer_config_json) {
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(tokenizer_config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return invalid_argument("tokenizer_config.json is not a JSON object");
  }
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return not_found("tokenizer_config.json has no \"chat_template\"; pass a template explicitly");
  }
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    bool found = false;
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        source = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) return not_found("tokenizer_config.json \"chat_template\" list has no template named \"default\"");
  } else {
    return invalid_argument("tokenizer_config.json \"chat_template\" must be a string or a list of {name, template}");
  }
  SpecialTokens tokens;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (auto text = token_text(config, key)) tokens.emplace_back(key, *text);
  }
  auto result = compile_with(source, std::move(tokens));
  if (!result.has_value()) return result.status().with_context("tokenizer_config.json chat_template");
  return result;
}

Expected<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                           const ChatTemplateOptions& options) const {
  if (!program_) return invalid_argument("chat template was not compiled");
  std::vector<jinja::Value> message_values;
  message_values.reserve(messages.size());
  for (const auto& m : messages) {
    std::vector<std::pair<jinja::Value, jinja::Value>> fields = {{jinja::Value("role"), jinja::Value(m.role)},
                                                                 {jinja::Value("content"), jinja::Value(m.content)}};
    if (!m.extra.is_null()) {
      if (!m.extra.is_object()) return invalid_argument("chat message extra fields must be a JSON object");
      if (!json_depth_ok(m.extra, 0)) return invalid_argument("chat message fields are nested too deeply");
      for (const auto& [key, value] : m.extra.items()) {
        jinja::Value v = jinja::from_json(value);
        bool replaced = false;
        for (auto& [k, existing] : fields) {
          if (k.as_string() == key) {
            existing = v;
            replaced = true;
          }
        }
        if (!replaced) fields.emplace_back(jinja::Value(key), std::move(v));
      }
    }
    message_values.push_back(jinja::Value::dict(std::move(fields)));
  }
  std::vector<std::pair<std::string, jinja::Value>> context;
  context.emplace_back("messages", jinja::Value::list(std::move(message_values)));
  if (!options.tools.is_null() && !json_depth_ok(options.tools, 0)) {
    return invalid_argument("tool definitions are nested too deeply");
  }
  context.emplace_back("tools", options.tools.is_null() ? jinja::Value::none() : jinja::from_json(options.tools));
  context.emplace_back("documents", jinja::Value::none());
  context.emplace_back("add_generation_prompt", jinja::Value(options.add_generation_prompt));
  for (const auto& [name, text] : special_tokens_) context.emplace_back(name, jinja::Value(text));
  if (!options.extra_context.is_null()) {
    if (!options.extra_context.is_object()) return invalid_argument("chat template extra context must be a JSON object");
    if (!json_depth_ok(options.extra_context, 0)) return invalid_argument("chat template extra context is nested too deeply");
    for (const auto& [key, value] : options.extra_context.items()) {
      bool replaced = false;
      for (auto& [k, v] : context) {
        if (k == key) {
          v = jinja::from_json(value);
          replaced = true;
        }
      }
      if (!replaced) context.emplace_back(key, jinja::from_json(value));
    }
  }
  jinja::Interpreter interpreter{jinja::RenderLimits{}};
  return interpreter.render(*program_, std::move(context));
}

}  // namespace kiln::llm
