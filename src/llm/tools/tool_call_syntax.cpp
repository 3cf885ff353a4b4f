#include "llm/tools/tool_call_syntax.h"

namespace kiln::llm::tools {

std::optional<ToolCallSyntax> detect_tool_call_syntax(std::string_view source) {
  if (source.find("<tool_call>") != std::string_view::npos) return ToolCallSyntax::kHermes;
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallSyntax::kMistral;
  // Llama 3.1's template: the built-in tools go through <|python_tag|>, custom ones as JSON with
  // "parameters" (its instructions name the key).
  if (source.find("<|python_tag|>") != std::string_view::npos ||
      (source.find("<|start_header_id|>") != std::string_view::npos &&
       source.find("\"parameters\"") != std::string_view::npos)) {
    return ToolCallSyntax::kLlama3Json;
  }
  return std::nullopt;
}

std::string_view tool_call_syntax_name(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::kHermes:
      return "hermes";
    case ToolCallSyntax::kLlama3Json:
      return "llama3_json";
    case ToolCallSyntax::kMistral:
      return "mistral";
  }
  return "unknown";
}

std::optional<ToolCallSyntax> tool_call_syntax_named(std::string_view name) {
  for (auto s : {ToolCallSyntax::kHermes, ToolCallSyntax::kLlama3Json, ToolCallSyntax::kMistral}) {
    if (tool_call_syntax_name(s) == name) return s;
  }
  return std::nullopt;
}

std::string_view arguments_key(ToolCallSyntax syntax) {
  return syntax == ToolCallSyntax::kLlama3Json ? "parameters" : "arguments";
}

}  // namespace kiln::llm::tools
