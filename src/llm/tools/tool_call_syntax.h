// ToolCallSyntax: how a model family writes a call to one of the request's tools, as its chat
// template teaches it. Kiln reads three:
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one block a call
//                (Qwen 2.5/3, Hermes, the demo model);
//   llama3_json  {"name": "f", "parameters": {...}}, calls separated by "; ", optionally after
//                <|python_tag|> (Llama 3.1/3.2/3.3);
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] (Mistral's v3 format).
// The family is found in the template's source, or named with `kiln serve --tool-call-parser`.
#pragma once

#include <optional>
#include <string_view>

namespace kiln::llm::tools {

enum class ToolCallSyntax { kHermes, kLlama3Json, kMistral };

// The syntax the template's source teaches, when it names one of the families' markers.
std::optional<ToolCallSyntax> detect_tool_call_syntax(std::string_view chat_template_source);

std::string_view tool_call_syntax_name(ToolCallSyntax syntax);
std::optional<ToolCallSyntax> tool_call_syntax_named(std::string_view name);
// "hermes, llama3_json, mistral", for messages and --help.
inline constexpr std::string_view kToolCallSyntaxNames = "hermes, llama3_json, mistral";

// The key a call's arguments go under ("parameters" for llama3_json, else "arguments").
std::string_view arguments_key(ToolCallSyntax syntax);

}  // namespace kiln::llm::tools
