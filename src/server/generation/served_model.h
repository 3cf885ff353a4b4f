// ServedModel: what the protocol layer knows of the model it serves: the name clients use, the
// tokenizer, the chat template (the model's own, or one given with --chat-template), the
// request defaults from generation_config.json, the end tokens and the limits of the engine.
// Built once at start-up and immutable after; it owns the tokenizer and the template and is
// read from every network thread at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "llm/generation/sampling_params.h"
#include "llm/jinja/chat_template.h"
#include "llm/structured/grammar_cache.h"
#include "llm/tokenizers/tokenizer.h"
#include "llm/tools/tool_call_syntax.h"

namespace kiln::server {

struct ServedModel {
  std::string name;
  std::unique_ptr<llm::Tokenizer> tokenizer;
  std::optional<llm::ChatTemplate> chat_template;  // absent: chat requests get a 400
  llm::SamplingParams defaults;   // temperature, top_k, top_p, min_p, repetition_penalty from generation_config
  std::vector<int32_t> eos_ids;
  int64_t max_seq_len = 0;
  int64_t vocab_size = 0;
  int64_t created = 0;            // unix seconds, for /v1/models
  // Structured outputs' compiled grammars (thread-safe; it borrows the tokenizer above).
  std::shared_ptr<llm::structured::GrammarCache> grammars;
  // How the model writes tool calls (found in its chat template, or named at start-up); absent:
  // requests that let the model call tools get a 400.
  std::optional<llm::tools::ToolCallSyntax> tool_syntax;

  // The text of one token as clients see it in logprobs ("" when it does not decode).
  std::string token_text(int32_t id) const;
};

// Builds a ServedModel from the files an engine carries (tokenizer, tokenizer_config.json,
// generation_config.json). `chat_template_source`, when set, replaces the model's template;
// `tool_syntax`, when set, replaces the one the template teaches.
Expected<ServedModel> served_model_from_files(const std::map<std::string, std::string>& files, std::string name,
                                              int64_t max_seq_len, int64_t vocab_size,
                                              const std::optional<std::string>& chat_template_source,
                                              std::optional<llm::tools::ToolCallSyntax> tool_syntax = std::nullopt);

}  // namespace kiln::server
