// Chat templates: turn a conversation into the prompt text a model was trained on, by rendering
// the model's Jinja chat template (tokenizer_config.json "chat_template") exactly as Hugging Face
// transformers' apply_chat_template(tokenize=False) does, byte for byte.
//
// The render context mirrors transformers: `messages` (each a dict of role, content and the
// message's extra fields), `tools` (None when absent), `documents` (None),
// `add_generation_prompt`, the special tokens (bos_token, eos_token, ... when the config defines
// them) and ChatTemplateOptions::extra_context (e.g. enable_thinking), plus the globals
// raise_exception and strftime_now.
//
// Limits (documented errors, never crashes): templates nest at most 128 levels; a render
// evaluates at most 5,000,000 expressions/statements, nests macro calls at most 64 deep, builds
// no string and no output larger than 16 MiB, and ranges are capped at 100,000 items as in
// jinja2's sandbox. JSON inputs nested deeper than 256 levels are refused.
//
// A ChatTemplate is immutable after compile() and safe to render from several threads at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kiln::llm {

namespace jinja {
struct Stmt;
}

struct ChatMessage {
  std::string role;
  std::string content;
  // Further fields of the message (tool_calls, name, reasoning_content, tool_call_id, ...), in
  // the order given; an object. A "content" key here replaces `content` (e.g. null, or a list
  // of parts).
  nlohmann::ordered_json extra;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;          // a list of tool definitions; null: no tools
  nlohmann::ordered_json extra_context;  // an object of further template variables (enable_thinking, ...)
};

class ChatTemplate {
 public:
  // Compiles template text, with the bos/eos token strings from tokenizer_config.json.
  static Expected<ChatTemplate> compile(std::string_view source, std::string bos_token, std::string eos_token);
  // Reads "chat_template" (a string, or a list of {name, template} from which "default" is
  // taken) and the special tokens from a tokenizer_config.json text.
  static Expected<ChatTemplate> from_tokenizer_config(std::string_view tokenizer_config_json);

  Expected<std::string> render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const;

  const std::string& source() const { return *source_; }

 private:
  using SpecialTokens = std::vector<std::pair<std::string, std::string>>;  // name -> text, e.g. bos_token
  static Expected<ChatTemplate> compile_with(std::string_view source, SpecialTokens special_tokens);

  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> program_;
  SpecialTokens special_tokens_;
};

}  // namespace kiln::llm
