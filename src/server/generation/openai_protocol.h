// The OpenAI-compatible API's wire format, apart from any transport: request bodies of
// /v1/completions and /v1/chat/completions parsed and validated into a GenerationPlan (prompts
// tokenised, chat messages rendered through the model's template), the response formats
// (complete JSON and server-sent event chunks ending in `data: [DONE]`), /v1/models, vLLM's
// /tokenize and /detokenize, and OpenAI's error object {"error": {message, type, param, code}}.
// Everything here is a pure function of its arguments and the ServedModel; safe from any thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"
#include "server/generation/generation_plan.h"
#include "server/http_message.h"
#include "server/generation/response_format.h"
#include "server/generation/served_model.h"

namespace kiln::server {

// Limits on one request (beyond the engine's context window).
inline constexpr int64_t kMaxChoices = 16;    // n, and prompts x n for list prompts
inline constexpr size_t kMaxPrompts = 16;     // prompts in one completions request
inline constexpr size_t kMaxMessages = 1024;  // chat messages in one request
inline constexpr size_t kMaxTools = 128;      // tools in one chat request

// `raw_body`, the body's text, gives a JSON schema's properties in their written order (the
// order structured outputs write them in); without it they follow the parsed body's order.
ApiResult<GenerationPlan> parse_completion_request(const nlohmann::json& body, const ServedModel& model,
                                                   const std::string& request_id, std::string_view raw_body = {});
ApiResult<GenerationPlan> parse_chat_request(const nlohmann::json& body, const ServedModel& model,
                                             const std::string& request_id, std::string_view raw_body = {});

// vLLM's /tokenize ({"prompt"} or {"messages"}) and /detokenize ({"tokens"}): the response body.
ApiResult<std::string> tokenize_response(const nlohmann::json& body, const ServedModel& model);
ApiResult<std::string> detokenize_response(const nlohmann::json& body, const ServedModel& model);

// An id: `prefix` and 24 random hex digits ("chatcmpl-...", "call_...").
std::string random_id(const char* prefix);

// GET /v1/models and /v1/models/{id}.
std::string models_response(const ServedModel& model);
std::string model_response(const ServedModel& model);

std::unique_ptr<ResponseFormat> make_completion_format(const ServedModel& model);
std::unique_ptr<ResponseFormat> make_chat_format(const ServedModel& model);

}  // namespace kiln::server
