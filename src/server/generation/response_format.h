// ResponseFormat: how one API writes a generation's answer: the whole response body when it is
// complete, or server-sent events as it streams. One implementation per API (OpenAI
// completions, OpenAI chat, KServe generate), in that API's protocol file. One format serves one
// response: the GenerationJob keeps the choices, and a format keeps only what it writes with
// (the model it reads token texts from, a stream's constant tail, the tool-call parsers of
// streamed choices).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/generation/generation_plan.h"
#include "server/http_message.h"

namespace kiln::server {

class ResponseFormat {
 public:
  virtual ~ResponseFormat() = default;

  // Streaming: appends to `out` the event(s) for new output of one choice. `text` and `tokens`
  // are what arrived (a streamed choice keeps no text or tokens of its own; its finish reason and
  // stop string are set); `first` on the choice's first chunk; `prompt` is its request's prompt
  // state (for echo). Called once a token per stream, so it appends rather than returns.
  virtual void append_stream_chunk(const GenerationPlan& plan, const ChoiceState& choice, const PromptState& prompt,
                                   std::string_view text, std::span<const llm::TokenInfo> tokens, bool first,
                                   std::string& out) = 0;
  // The same events as a string of their own (for callers that keep one chunk alone).
  std::string stream_chunk(const GenerationPlan& plan, const ChoiceState& choice, const PromptState& prompt,
                           std::string_view text, std::span<const llm::TokenInfo> tokens, bool first) {
    std::string out;
    append_stream_chunk(plan, choice, prompt, text, tokens, first, out);
    return out;
  }
  // Streaming: what follows the last chunk (the usage chunk when asked, and the end marker).
  virtual std::string stream_end(const GenerationPlan& plan, const llm::RequestUsage& usage) = 0;
  // Streaming: an error after the response has started.
  virtual std::string stream_error(const ApiError& error) = 0;
  // The complete (non-streaming) response body.
  virtual std::string complete(const GenerationPlan& plan, const std::vector<ChoiceState>& choices,
                               const std::vector<PromptState>& prompts, const llm::RequestUsage& usage) = 0;
  // A refusal before any output, in this API's error shape.
  virtual HttpResponse error(const ApiError& error) = 0;
};

// "data: <json>\n\n", one server-sent event.
inline std::string sse_event(std::string_view json) {
  std::string out = "data: ";
  out += json;
  out += "\n\n";
  return out;
}

}  // namespace kiln::server
