// The response side of the OpenAI-compatible API (openai_protocol.h): complete bodies, stream
// chunks, model lists and error objects.
#include "server/generation/openai_protocol.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "llm/tools/tool_call_parser.h"
#include "server/request_fields.h"

namespace kiln::server {
namespace {

using nlohmann::json;

json usage_json(const llm::RequestUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
}

json finish_json(llm::FinishReason r) {
  if (r == llm::FinishReason::kNone) return nullptr;
  return std::string(llm::finish_reason_name(r));
}

json logprob_value(const std::optional<float>& v) {
  if (!v) return nullptr;
  return *v;  // NaN and infinities are written as null by the JSON writer
}

// Completions' logprobs object over `tokens`, text offsets counted from `offset`.
json completion_logprobs(const ServedModel& m, std::span<const llm::TokenInfo> tokens, size_t offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& t : tokens) {
    std::string s = m.token_text(t.token);
    offsets.push_back(offset);
    offset += s.size();
    lps.push_back(logprob_value(t.logprob));
    if (!t.logprob) {
      tops.push_back(nullptr);
    } else {
      json top = json::object();
      for (const auto& alt : t.top) {
        std::string a = m.token_text(alt.token);
        if (!top.contains(a)) top[a] = alt.logprob;
      }
      if (!top.contains(s)) top[s] = *t.logprob;  // the chosen token always shows, as vLLM does
      tops.push_back(std::move(top));
    }
    toks.push_back(std::move(s));
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat's logprobs.content entries for `tokens`.
json chat_logprobs(const ServedModel& m, std::span<const llm::TokenInfo> tokens) {
  json content = json::array();
  for (const auto& t : tokens) {
    std::string s = m.token_text(t.token);
    json top = json::array();
    for (const auto& alt : t.top) {
      std::string a = m.token_text(alt.token);
      top.push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes_of(a)}});
    }
    content.push_back({{"token", s}, {"logprob", logprob_value(t.logprob)}, {"bytes", bytes_of(s)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// The last events of a stream: a chunk with no choices and the usage (when the request asked for
// it with stream_options.include_usage), then [DONE]. `object`: the stream's chunk object type.
std::string stream_end_events(const GenerationPlan& plan, const llm::RequestUsage& usage, const char* object) {
  std::string out;
  if (plan.include_usage) {
    json chunk = {{"id", plan.id}, {"object", object}, {"created", plan.created}, {"model", plan.model},
                  {"choices", json::array()}, {"usage", usage_json(usage)}};
    out += sse_event(dump_json(chunk));
  }
  return out + "data: [DONE]\n\n";
}

// Streaming writes one chunk per token per stream, so the chunks without logprobs are appended
// directly to the connection's pending bytes rather than built as a tree of maps (about twenty
// allocations each): the same bytes as dump_json of the object (keys in its sorted order, no
// spaces), which the tests check. The helpers below append one member's value each.
//
// append_json_string writes `s` as dump_json does: printable ASCII other than '"' and '\\' (most
// token texts) goes as it is; anything else (escapes, UTF-8 and its repair) through dump_json.
void append_json_string(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char ch) {
    const auto b = static_cast<unsigned char>(ch);
    return b >= 0x20 && b < 0x7f && b != '"' && b != '\\';
  });
  if (!plain) {
    out += dump_json(json(std::string(s)));
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

void append_finish(std::string& out, llm::FinishReason r) {
  if (r == llm::FinishReason::kNone) {
    out += "null";
  } else {
    append_json_string(out, llm::finish_reason_name(r));
  }
}

void append_int(std::string& out, int64_t v) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
  out.append(digits, end);
}

// The members that close every plain chunk of one stream (created, id, model, object and, when
// asked, a null usage) and its event, written once a stream.
class ChunkTail {
 public:
  const std::string& get(const GenerationPlan& plan, std::string_view object) {
    if (tail_.empty()) {
      tail_ = "}],\"created\":" + std::to_string(plan.created) + ",\"id\":" + json_string(plan.id) +
              ",\"model\":" + json_string(plan.model) + ",\"object\":\"" + std::string(object) +
              (plan.include_usage ? "\",\"usage\":null}\n\n" : "\"}\n\n");
    }
    return tail_;
  }

 private:
  std::string tail_;
};

// A plain chunk's event opens with its choice object; the choice's members follow, then the tail.
constexpr std::string_view kChunkOpen = "data: {\"choices\":[{";

class CompletionFormat : public ResponseFormat {
 public:
  explicit CompletionFormat(const ServedModel& m) : m_(m) {}

  void append_stream_chunk(const GenerationPlan& plan, const ChoiceState& c, const PromptState& prompt,
                           std::string_view text, std::span<const llm::TokenInfo> tokens, bool first,
                           std::string& out) override {
    const bool echo = first && plan.echo;
    std::string_view out_text = plan.discard_generated ? std::string_view() : text;
    std::string echoed;
    if (echo) {
      echoed = plan.prompt_texts[c.request];
      echoed += out_text;
      out_text = echoed;
    }
    const llm::FinishReason finish =
        plan.discard_generated && c.finish != llm::FinishReason::kNone ? llm::FinishReason::kLength : c.finish;
    if (plan.logprobs < 0) {
      out += kChunkOpen;
      out += "\"finish_reason\":";
      append_finish(out, finish);
      out += ",\"index\":";
      append_int(out, c.index);
      out += ",\"logprobs\":null,\"stop_reason\":";
      if (c.stop_string) {
        append_json_string(out, *c.stop_string);
      } else {
        out += "null";
      }
      out += ",\"text\":";
      append_json_string(out, out_text);
      out += tail_.get(plan, "text_completion");
      return;
    }
    std::vector<llm::TokenInfo> out_tokens;
    if (echo) out_tokens = prompt.tokens;
    if (!plan.discard_generated) out_tokens.insert(out_tokens.end(), tokens.begin(), tokens.end());
    json choice = {{"index", c.index}, {"text", std::string(out_text)}, {"logprobs", nullptr},
                   {"finish_reason", finish_json(finish)},
                   {"stop_reason", c.stop_string ? json(*c.stop_string) : json(nullptr)}};
    choice["logprobs"] = completion_logprobs(m_, out_tokens, c.text_offset);
    json chunk = {{"id", plan.id}, {"object", "text_completion"}, {"created", plan.created}, {"model", plan.model},
                  {"choices", json::array({choice})}};
    if (plan.include_usage) chunk["usage"] = nullptr;
    out += sse_event(dump_json(chunk));
  }

  std::string stream_end(const GenerationPlan& plan, const llm::RequestUsage& usage) override {
    return stream_end_events(plan, usage, "text_completion");
  }

  std::string stream_error(const ApiError& e) override { return sse_event(openai_error_body(e)) + "data: [DONE]\n\n"; }

  std::string complete(const GenerationPlan& plan, const std::vector<ChoiceState>& choices,
                       const std::vector<PromptState>& prompts, const llm::RequestUsage& usage) override {
    json out = json::array();
    for (const auto& c : choices) {
      std::string text = plan.echo ? plan.prompt_texts[c.request] : "";
      std::vector<llm::TokenInfo> tokens;
      if (plan.echo) tokens = prompts[c.request].tokens;
      if (!plan.discard_generated) {
        text += c.text;
        tokens.insert(tokens.end(), c.tokens.begin(), c.tokens.end());
      }
      json choice = {{"index", c.index}, {"text", text}, {"logprobs", nullptr},
                     {"finish_reason", plan.discard_generated ? json("length") : finish_json(c.finish)},
                     {"stop_reason", c.stop_string ? json(*c.stop_string) : json(nullptr)}};
      if (plan.logprobs >= 0) choice["logprobs"] = completion_logprobs(m_, tokens, 0);
      out.push_back(std::move(choice));
    }
    return dump_json({{"id", plan.id}, {"object", "text_completion"}, {"created", plan.created}, {"model", plan.model},
                      {"choices", out}, {"usage", usage_json(usage)}});
  }

  HttpResponse error(const ApiError& e) override { return openai_error_response(e); }

 private:
  const ServedModel& m_;
  ChunkTail tail_;
};

// One tool call as message.tool_calls lists it.
json tool_call_json(const llm::tools::ToolCall& call, const std::string& id) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

// The calls a choice returns: all, or the first when parallel calls are not allowed.
size_t calls_allowed(const ToolCalling& t, size_t already, size_t now) {
  if (t.parallel) return now;
  return already >= 1 ? 0 : std::min<size_t>(now, 1);
}

class ChatFormat : public ResponseFormat {
 public:
  explicit ChatFormat(const ServedModel& m) : m_(m) {}

  void append_stream_chunk(const GenerationPlan& plan, const ChoiceState& c, const PromptState&, std::string_view text,
                           std::span<const llm::TokenInfo> tokens, bool first, std::string& out) override {
    if (plan.tool_calling) {
      append_tool_stream_chunk(plan, c, text, tokens, first, out);
      return;
    }
    if (plan.logprobs < 0) {
      out += kChunkOpen;
      out += "\"delta\":{\"content\":";
      append_json_string(out, text);
      out += first ? ",\"role\":\"assistant\"}" : "}";
      out += ",\"finish_reason\":";
      append_finish(out, c.finish);
      out += ",\"index\":";
      append_int(out, c.index);
      out += ",\"logprobs\":null";
      out += tail_.get(plan, "chat.completion.chunk");
      return;
    }
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    delta["content"] = std::string(text);
    json choice = {{"index", c.index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish_json(c.finish)}};
    choice["logprobs"] = chat_logprobs(m_, tokens);
    json chunk = {{"id", plan.id}, {"object", "chat.completion.chunk"}, {"created", plan.created}, {"model", plan.model},
                  {"choices", json::array({choice})}};
    if (plan.include_usage) chunk["usage"] = nullptr;
    out += sse_event(dump_json(chunk));
  }

  std::string stream_end(const GenerationPlan& plan, const llm::RequestUsage& usage) override {
    return stream_end_events(plan, usage, "chat.completion.chunk");
  }

  std::string stream_error(const ApiError& e) override { return sse_event(openai_error_body(e)) + "data: [DONE]\n\n"; }

  std::string complete(const GenerationPlan& plan, const std::vector<ChoiceState>& choices, const std::vector<PromptState>&,
                       const llm::RequestUsage& usage) override {
    json out = json::array();
    for (const auto& c : choices) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      json finish = finish_json(c.finish);
      if (plan.tool_calling) {
        const ToolCalling& t = *plan.tool_calling;
        auto parsed = llm::tools::ToolCallParser::parse(t.syntax, t.forced, c.text);
        parsed.calls.resize(calls_allowed(t, 0, parsed.calls.size()));
        if (!parsed.calls.empty()) {
          json calls = json::array();
          for (const auto& call : parsed.calls) calls.push_back(tool_call_json(call, random_id("call_")));
          message["tool_calls"] = std::move(calls);
          if (c.finish == llm::FinishReason::kStop) finish = "tool_calls";  // a cut choice stays "length"
        }
        message["content"] = parsed.calls.empty() || !parsed.content.empty() ? json(parsed.content) : json(nullptr);
      }
      json choice = {{"index", c.index},
                     {"message", std::move(message)},
                     {"logprobs", nullptr},
                     {"finish_reason", std::move(finish)},
                     {"stop_reason", c.stop_string ? json(*c.stop_string) : json(nullptr)}};
      if (plan.logprobs >= 0) choice["logprobs"] = chat_logprobs(m_, c.tokens);
      out.push_back(std::move(choice));
    }
    return dump_json({{"id", plan.id}, {"object", "chat.completion"}, {"created", plan.created}, {"model", plan.model},
                      {"choices", out}, {"usage", usage_json(usage)}});
  }

  HttpResponse error(const ApiError& e) override { return openai_error_response(e); }

 private:
  // A streamed choice of a request with tools: its text goes through the choice's parser, and
  // each chunk says what the parser could tell: content, then each completed call as OpenAI
  // streams one (a first piece with its id and name, then its arguments), then the finish.
  void append_tool_stream_chunk(const GenerationPlan& plan, const ChoiceState& c, std::string_view text,
                                std::span<const llm::TokenInfo> tokens, bool first, std::string& out) {
    const ToolCalling& t = *plan.tool_calling;
    auto it = tool_streams_.try_emplace(c.index, t.syntax, t.forced).first;
    ChoiceTools& state = it->second;
    llm::tools::ToolCallOutput said = state.parser.feed(text);
    if (c.finish != llm::FinishReason::kNone) {
      llm::tools::ToolCallOutput tail = state.parser.finish();
      said.content += tail.content;
      for (auto& call : tail.calls) said.calls.push_back(std::move(call));
    }
    std::vector<json> deltas;
    if (!said.content.empty() || (plan.logprobs >= 0 && !tokens.empty())) deltas.push_back({{"content", said.content}});
    said.calls.resize(calls_allowed(t, state.calls, said.calls.size()));
    for (const auto& call : said.calls) {
      const size_t index = state.calls++;
      json head = {{"index", index}, {"id", random_id("call_")}, {"type", "function"},
                   {"function", {{"name", call.name}, {"arguments", ""}}}};
      deltas.push_back({{"tool_calls", json::array({head})}});
      json args = {{"index", index}, {"function", {{"arguments", call.arguments}}}};
      deltas.push_back({{"tool_calls", json::array({args})}});
    }
    if (first && deltas.empty()) deltas.push_back({{"content", ""}});
    json finish = nullptr;
    if (c.finish != llm::FinishReason::kNone) {
      finish = state.calls > 0 && c.finish == llm::FinishReason::kStop ? json("tool_calls") : finish_json(c.finish);
      if (deltas.empty()) deltas.push_back(json::object());
    }
    for (size_t i = 0; i < deltas.size(); ++i) {
      json& delta = deltas[i];
      if (first && i == 0) {
        delta["role"] = "assistant";
        if (!delta.contains("content")) delta["content"] = nullptr;
      }
      json choice = {{"index", c.index}, {"delta", std::move(delta)}, {"logprobs", nullptr},
                     {"finish_reason", i + 1 == deltas.size() ? finish : json(nullptr)}};
      if (plan.logprobs >= 0 && i == 0) choice["logprobs"] = chat_logprobs(m_, tokens);
      json chunk = {{"id", plan.id}, {"object", "chat.completion.chunk"}, {"created", plan.created}, {"model", plan.model},
                    {"choices", json::array({std::move(choice)})}};
      if (plan.include_usage) chunk["usage"] = nullptr;
      out += sse_event(dump_json(chunk));
    }
    if (c.finish != llm::FinishReason::kNone) tool_streams_.erase(it);
  }

  struct ChoiceTools {
    ChoiceTools(llm::tools::ToolCallSyntax syntax, bool forced) : parser(syntax, forced) {}
    llm::tools::ToolCallParser parser;
    size_t calls = 0;  // calls streamed so far
  };

  const ServedModel& m_;
  ChunkTail tail_;
  std::map<int32_t, ChoiceTools> tool_streams_;  // by choice index, while the choice streams
};

json model_json(const ServedModel& m) {
  return {{"id", m.name}, {"object", "model"}, {"created", m.created}, {"owned_by", "kiln"}, {"root", m.name},
          {"max_model_len", m.max_seq_len}};
}

}  // namespace

std::string models_response(const ServedModel& m) {
  return dump_json({{"object", "list"}, {"data", json::array({model_json(m)})}});
}

std::string model_response(const ServedModel& m) { return dump_json(model_json(m)); }

std::unique_ptr<ResponseFormat> make_completion_format(const ServedModel& m) { return std::make_unique<CompletionFormat>(m); }
std::unique_ptr<ResponseFormat> make_chat_format(const ServedModel& m) { return std::make_unique<ChatFormat>(m); }

}  // namespace kiln::server
