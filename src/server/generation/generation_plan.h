// GenerationPlan: what one generation endpoint call (OpenAI completions or chat, KServe
// generate) asks of the engine, as the protocol parsers produce it: one engine request per
// prompt, plus how the answer must be shaped (streaming, echo, logprobs, usage). Plain data; the
// GenerationJob that runs it owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llm/serving/request.h"
#include "llm/tools/tool_call_syntax.h"

namespace kiln::server {

enum class Api { kCompletions, kChat, kKServe };

// A chat request whose tools the model may call: each choice's text is parsed for calls.
struct ToolCalling {
  llm::tools::ToolCallSyntax syntax = llm::tools::ToolCallSyntax::kHermes;
  bool forced = false;    // tool_choice required or a named function: a grammar writes calls only
  bool parallel = true;   // parallel_tool_calls: a choice may return more than one call
};

struct GenerationPlan {
  Api api = Api::kCompletions;
  std::string id;          // response id ("cmpl-...", "chatcmpl-...")
  int64_t created = 0;     // unix seconds
  std::string model;       // the served model name, echoed in responses
  std::vector<llm::GenerationRequest> requests;  // one per prompt; each has `n` choices
  std::vector<std::string> prompt_texts;          // per request: the prompt as text (for echo)
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  bool echo = false;               // completions: the prompt precedes the text
  bool discard_generated = false;  // completions with max_tokens 0 and echo: score the prompt only
  int32_t logprobs = -1;           // completions: logprobs N; chat: top_logprobs (when logprobs)
  // Text of the prompt that log lines may show (only with --log-prompts).
  std::string log_prompt;
  std::string user;  // OpenAI's end-user id, for the access log
  std::optional<ToolCalling> tool_calling;  // chat with tools to call
};

// The state of one choice while its events arrive.
struct ChoiceState {
  int32_t index = 0;     // in the response: request * n + choice
  size_t request = 0;    // which of the plan's requests
  std::string text;      // generated text so far (not kept when streaming)
  std::vector<llm::TokenInfo> tokens;  // generated tokens so far, logprobs when asked (not kept when streaming)
  llm::FinishReason finish = llm::FinishReason::kNone;
  std::optional<std::string> stop_string;
  bool started = false;  // streaming: its first chunk has been sent
  size_t text_offset = 0;  // streaming completions: bytes of text sent so far (for text_offset)
};

// What arrived for one request's prompt (echo with logprobs).
struct PromptState {
  std::vector<llm::TokenInfo> tokens;
  bool received = false;
};

}  // namespace kiln::server
