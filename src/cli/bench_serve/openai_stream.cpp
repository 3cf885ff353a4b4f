#include "cli/bench_serve/openai_stream.h"

#include "nlohmann/json.hpp"

namespace kiln::cli::bench_serve {

using nlohmann::json;

Expected<Endpoint> endpoint_kind(std::string_view path) {
  const auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  if (ends_with("/chat/completions")) return Endpoint::kChatCompletions;
  if (ends_with("/completions")) return Endpoint::kCompletions;
  return invalid_argument("--endpoint '" + std::string(path) +
                          "': expected /v1/completions or /v1/chat/completions");
}

Expected<std::string> request_body(Endpoint endpoint, const std::string& model, const BenchPrompt& prompt) {
  json body = {
      {"model", model},
      {"max_tokens", prompt.output_len},
      {"ignore_eos", true},
      {"temperature", 0.0},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
  };
  if (endpoint == Endpoint::kChatCompletions) {
    if (prompt.is_ids()) {
      return invalid_argument("a token-id prompt cannot be sent to the chat endpoint; give text prompts");
    }
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt.text}}});
  } else if (prompt.is_ids()) {
    body["prompt"] = prompt.ids;
  } else {
    body["prompt"] = prompt.text;
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Expected<StreamChunk> parse_stream_chunk(Endpoint endpoint, std::string_view data) {
  StreamChunk c;
  if (data == "[DONE]") {
    c.done = true;
    return c;
  }
  const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("stream event is not a JSON object: " + std::string(data.substr(0, 200)));
  }
  if (const auto e = j.find("error"); e != j.end()) {
    const auto message = e->is_object() ? e->find("message") : e->end();
    c.error = (message != e->end() && message->is_string()) ? message->get<std::string>() : e->dump();
    return c;
  }
  if (const auto choices = j.find("choices"); choices != j.end() && choices->is_array() && !choices->empty()) {
    const json& choice = (*choices)[0];
    if (endpoint == Endpoint::kChatCompletions) {
      if (const auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
        for (const char* field : {"reasoning_content", "content"}) {
          const auto text = delta->find(field);
          if (text != delta->end() && text->is_string()) c.text += text->get<std::string>();
        }
      }
    } else if (const auto text = choice.find("text"); text != choice.end() && text->is_string()) {
      c.text = text->get<std::string>();
    }
    if (const auto reason = choice.find("finish_reason"); reason != choice.end() && reason->is_string()) {
      c.finish_reason = reason->get<std::string>();
    }
  }
  if (const auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
    const auto count = [&](const char* field) -> std::optional<int64_t> {
      const auto v = usage->find(field);
      if (v == usage->end() || !v->is_number_integer()) return std::nullopt;
      return v->get<int64_t>();
    };
    c.prompt_tokens = count("prompt_tokens");
    c.completion_tokens = count("completion_tokens");
  }
  return c;
}

}  // namespace kiln::cli::bench_serve
