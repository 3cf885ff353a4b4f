// The OpenAI wire format as the serving benchmark speaks it: the body of one streaming
// /v1/completions or /v1/chat/completions request, and the meaning of one server-sent event of its
// response. Requests ask for exactly output_len tokens (max_tokens with ignore_eos, temperature 0)
// and for a final usage chunk (stream_options.include_usage), so the token counts come from the
// server rather than from a guess. Stateless; values are owned by the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "cli/bench_serve/bench_dataset.h"

namespace kiln::cli::bench_serve {

enum class Endpoint { kCompletions, kChatCompletions };

// "/v1/completions" -> kCompletions, "/v1/chat/completions" -> kChatCompletions, anything that ends
// in "/chat/completions" or "/completions" likewise (a server under a path prefix).
Expected<Endpoint> endpoint_kind(std::string_view path);

// The JSON body of one streaming request. A token-id prompt on the chat endpoint is an error.
Expected<std::string> request_body(Endpoint endpoint, const std::string& model, const BenchPrompt& prompt);

struct StreamChunk {
  bool done = false;                        // the "[DONE]" sentinel
  std::string text;                         // generated text in this chunk (may be empty)
  std::optional<std::string> finish_reason;
  std::optional<int64_t> prompt_tokens, completion_tokens;  // from a usage object
  std::optional<std::string> error;         // an error object sent inside the stream
};

// Parses the data of one event. Data that is not JSON, or not an object, is an error.
Expected<StreamChunk> parse_stream_chunk(Endpoint endpoint, std::string_view data);

}  // namespace kiln::cli::bench_serve
