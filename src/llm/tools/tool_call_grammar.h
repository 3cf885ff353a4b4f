// The grammar of a choice that must call tools (tool_choice "required" or a named function): the
// calls written exactly as the syntax writes them, each call's arguments valid JSON for its
// function's parameters schema (json_schema.h's subset), so that even a small model's forced call
// parses. One call, or one or more when parallel calls are allowed.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "llm/structured/grammar.h"
#include "llm/tools/tool_call_syntax.h"

namespace kiln::llm::tools {

struct ToolFunction {
  std::string name;             // [A-Za-z0-9_-]{1,64}, checked by the caller
  std::string parameters_json;  // the parameters schema's JSON text, members in written order; "" for none
  std::string path;             // where the schema was in the request, for errors
};

// Calls to any of `functions` (at least one).
Expected<structured::Grammar> tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolFunction>& functions,
                                                bool parallel);

}  // namespace kiln::llm::tools
