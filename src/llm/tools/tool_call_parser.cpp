#include "llm/tools/tool_call_parser.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "base/json_scan.h"

namespace kiln::llm::tools {
namespace {

using nlohmann::json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// How many bytes at the end of `s` could begin `marker` (a proper prefix of it).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

// {"name": "...", "<key>": {...}} (the other family's key and arguments as JSON text accepted too).
std::optional<ToolCall> call_from_json(const json& j, std::string_view key) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = j.find(std::string(key));
  if (args == j.end()) args = j.find(key == "arguments" ? "parameters" : "arguments");
  ToolCall call{name->get<std::string>(), "{}"};
  if (args != j.end()) {
    json value = *args;
    if (value.is_string()) value = json::parse(value.get<std::string>(), nullptr, false);
    if (!value.is_object()) return std::nullopt;
    call.arguments = value.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return call;
}

std::optional<ToolCall> call_from_text(std::string_view text, std::string_view key) {
  const json j = json::parse(trim(text), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return call_from_json(j, key);
}

// The JSON objects of `s` separated by ';' (llama3_json's parallel calls), or nothing when `s` is
// anything else.
std::optional<std::vector<std::string_view>> semicolon_separated_objects(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  for (;;) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i >= s.size() || s[i] != '{') return std::nullopt;
    const size_t start = i;
    JsonDepth scan;
    while (i < s.size() && scan.step(s[i]) > 0) ++i;  // to the object's closing brace
    if (i >= s.size()) return std::nullopt;
    out.push_back(s.substr(start, ++i - start));
    while (i < s.size() && is_space(s[i])) ++i;
    if (i == s.size()) return out;
    if (s[i] != ';') return std::nullopt;
    ++i;
  }
}

}  // namespace

ToolCallParser::ToolCallParser(ToolCallSyntax syntax, bool forced) : syntax_(syntax), forced_(forced) {
  state_ = State::kText;
  if (syntax == ToolCallSyntax::kLlama3Json) state_ = forced ? State::kRest : State::kUndecided;
  if (syntax == ToolCallSyntax::kMistral && forced) state_ = State::kRest;
}

// Trailing whitespace waits in pending_ws_ until visible content follows, so that the content
// told is the same however the text was cut into pieces.
void ToolCallParser::emit_content(std::string_view piece, ToolCallOutput& out) {
  size_t visible = piece.size();
  while (visible > 0 && is_space(piece[visible - 1])) --visible;
  if (visible > 0) {
    out.content += pending_ws_;
    pending_ws_.clear();
    out.content += piece.substr(0, visible);
  }
  pending_ws_ += piece.substr(visible);
}

void ToolCallParser::add_call(ToolCall call, ToolCallOutput& out) {
  out.calls.push_back(std::move(call));
  ++calls_made_;
}

bool ToolCallParser::parse_rest(std::string_view rest, ToolCallOutput& out) {
  const std::string_view key = arguments_key(syntax_);
  std::vector<ToolCall> calls;
  if (syntax_ == ToolCallSyntax::kLlama3Json) {
    rest = trim(rest);
    if (rest.starts_with(kPythonTag)) rest.remove_prefix(kPythonTag.size());
    auto objects = semicolon_separated_objects(rest);
    if (!objects) return false;
    for (std::string_view o : *objects) {
      auto call = call_from_text(o, key);
      if (!call) return false;
      calls.push_back(std::move(*call));
    }
  } else {
    const json j = json::parse(trim(rest), nullptr, false);
    if (j.is_array()) {
      if (j.empty()) return false;
      for (const json& item : j) {
        auto call = call_from_json(item, key);
        if (!call) return false;
        calls.push_back(std::move(*call));
      }
    } else if (auto call = call_from_json(j, key)) {
      calls.push_back(std::move(*call));
    } else {
      return false;
    }
  }
  for (auto& c : calls) add_call(std::move(c), out);
  return true;
}

ToolCallOutput ToolCallParser::feed(std::string_view text) {
  ToolCallOutput out;
  buf_ += text;
  for (;;) {
    switch (state_) {
      case State::kText: {
        if (syntax_ == ToolCallSyntax::kLlama3Json) {  // decided: content to the end
          emit_content(buf_, out);
          buf_.clear();
          return out;
        }
        const std::string_view marker = syntax_ == ToolCallSyntax::kHermes ? kHermesOpen : kMistralMarker;
        const size_t pos = buf_.find(marker);
        if (pos != std::string::npos) {
          emit_content(std::string_view(buf_).substr(0, pos), out);
          buf_.erase(0, pos + marker.size());
          state_ = syntax_ == ToolCallSyntax::kHermes ? State::kCall : State::kRest;
          continue;
        }
        const size_t keep = partial_marker(buf_, marker);
        emit_content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      case State::kCall: {
        const size_t pos = buf_.find(kHermesClose);
        if (pos == std::string::npos) return out;
        const std::string body = buf_.substr(0, pos);
        buf_.erase(0, pos + kHermesClose.size());
        if (auto call = call_from_text(body, arguments_key(syntax_))) {
          add_call(std::move(*call), out);
        } else {
          emit_content(std::string(kHermesOpen) + body + std::string(kHermesClose), out);
        }
        state_ = State::kText;
        continue;
      }
      case State::kUndecided: {
        const std::string_view visible = trim(buf_);
        if (visible.empty()) return out;
        if (visible.starts_with('{') || visible.starts_with(kPythonTag)) {
          state_ = State::kRest;
          return out;
        }
        if (kPythonTag.starts_with(visible)) return out;  // may still become the tag
        state_ = State::kText;
        continue;
      }
      case State::kRest:
        return out;
    }
  }
}

ToolCallOutput ToolCallParser::finish() {
  ToolCallOutput out;
  switch (state_) {
    case State::kText:
    case State::kUndecided:
      emit_content(buf_, out);
      break;
    case State::kCall:
      // The choice ended inside a block (its end tag never came): a whole call still counts.
      if (auto call = call_from_text(buf_, arguments_key(syntax_))) {
        add_call(std::move(*call), out);
      } else {
        emit_content(std::string(kHermesOpen) + buf_, out);
      }
      break;
    case State::kRest:
      if (!parse_rest(buf_, out)) {
        const bool marked = syntax_ == ToolCallSyntax::kMistral && !forced_;
        emit_content(marked ? std::string(kMistralMarker) + buf_ : buf_, out);
      }
      break;
  }
  buf_.clear();
  if (calls_made_ == 0) out.content += pending_ws_;
  pending_ws_.clear();
  return out;
}

ToolCallOutput ToolCallParser::parse(ToolCallSyntax syntax, bool forced, std::string_view text) {
  ToolCallParser p(syntax, forced);
  ToolCallOutput out = p.feed(text);
  ToolCallOutput tail = p.finish();
  out.content += tail.content;
  for (auto& c : tail.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace kiln::llm::tools
