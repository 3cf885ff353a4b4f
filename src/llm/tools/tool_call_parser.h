// ToolCallParser: the generated text of one choice, split into what the model said (content) and
// the calls it made to the request's tools, in the choice's ToolCallSyntax. Streaming: feed() takes
// each piece of text as it is generated and returns what can be told now; text that may be the
// start of a call is held until it is known, and a call is returned once it is complete. A block
// that does not parse as a call is given back as content, as it was written. Whitespace-only
// content around calls is dropped when the choice made a call (OpenAI's content is then null).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "llm/tools/tool_call_syntax.h"

namespace kiln::llm::tools {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object as compact text
};

struct ToolCallOutput {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  // `forced`: the output is calls only (tool_choice required or a named function, written under
  // the call grammar); Mistral's marker is then absent.
  ToolCallParser(ToolCallSyntax syntax, bool forced);

  ToolCallOutput feed(std::string_view text);
  // The end of the choice: whatever was held.
  ToolCallOutput finish();
  size_t calls_made() const { return calls_made_; }

  // A whole choice's text at once.
  static ToolCallOutput parse(ToolCallSyntax syntax, bool forced, std::string_view text);

 private:
  // kText: content, watching for a call's marker; kCall: inside a hermes block; kUndecided:
  // llama3_json before the first visible character; kRest: every byte to the end is calls.
  enum class State { kText, kCall, kUndecided, kRest };

  void emit_content(std::string_view piece, ToolCallOutput& out);
  void add_call(ToolCall call, ToolCallOutput& out);
  // The calls of a kRest tail, or false (nothing added) when any of it does not parse.
  bool parse_rest(std::string_view rest, ToolCallOutput& out);

  ToolCallSyntax syntax_;
  bool forced_;
  State state_;
  std::string buf_;         // text not yet told
  std::string pending_ws_;  // trailing whitespace of the content, told when visible content follows
  size_t calls_made_ = 0;
};

}  // namespace kiln::llm::tools
