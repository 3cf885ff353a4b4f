#include "llm/tools/tool_call_grammar.h"

#include "llm/structured/json_schema.h"

namespace kiln::llm::tools {
namespace {

using structured::Grammar;
using structured::GrammarItem;
using structured::GrammarRule;

// Appends `g`'s rules to `into` (rule references shifted) and returns where g's root went.
int32_t append_rules(Grammar& into, const Grammar& g) {
  const auto offset = static_cast<int32_t>(into.rules.size());
  for (GrammarRule rule : g.rules) {
    for (auto& alt : rule.alternatives) {
      for (GrammarItem& item : alt) {
        if (item.kind == GrammarItem::Kind::kRule) item.rule += offset;
      }
    }
    into.rules.push_back(std::move(rule));
  }
  return g.root + offset;
}

void append_literal(std::vector<GrammarItem>& seq, std::string_view text) {
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    seq.push_back({GrammarItem::Kind::kBytes, b, b, -1});
  }
}

GrammarItem ref(int32_t rule) { return {GrammarItem::Kind::kRule, 0, 0, rule}; }

int32_t add_rule(Grammar& g, std::string name, std::vector<std::vector<GrammarItem>> alternatives) {
  g.rules.push_back({std::move(name), std::move(alternatives)});
  return static_cast<int32_t>(g.rules.size()) - 1;
}

}  // namespace

Expected<Grammar> tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolFunction>& functions, bool parallel) {
  if (functions.empty()) return invalid_argument("tools: no function to call");
  std::string_view open, close, separator;
  switch (syntax) {
    case ToolCallSyntax::kHermes:
      open = "<tool_call>\n", close = "\n</tool_call>", separator = "\n";
      break;
    case ToolCallSyntax::kLlama3Json:
      separator = "; ";
      break;
    case ToolCallSyntax::kMistral:
      separator = ", ";
      break;
  }
  const std::string key(arguments_key(syntax));
  Grammar g;
  std::vector<std::vector<GrammarItem>> any_call;
  for (const ToolFunction& f : functions) {
    std::vector<GrammarItem> seq;
    append_literal(seq, open);
    append_literal(seq, "{\"name\": \"" + f.name + "\", \"" + key + "\": ");
    if (f.parameters_json.empty()) {
      append_literal(seq, "{}");
    } else {
      KILN_ASSIGN_OR_RETURN(Grammar args, structured::json_schema_grammar(f.parameters_json, f.path));
      seq.push_back(ref(append_rules(g, args)));
    }
    append_literal(seq, "}");
    append_literal(seq, close);
    any_call.push_back({ref(add_rule(g, "call_" + f.name, {std::move(seq)}))});
  }
  const int32_t call = add_rule(g, "call", std::move(any_call));
  std::vector<GrammarItem> root;
  if (syntax == ToolCallSyntax::kMistral) append_literal(root, "[");
  root.push_back(ref(call));
  if (parallel) {
    // more ::= separator call more | ""
    const int32_t more = add_rule(g, "more_calls", {});
    std::vector<GrammarItem> again;
    append_literal(again, separator);
    again.push_back(ref(call));
    again.push_back(ref(more));
    g.rules[static_cast<size_t>(more)].alternatives = {std::move(again), {}};
    root.push_back(ref(more));
  }
  if (syntax == ToolCallSyntax::kMistral) append_literal(root, "]");
  g.root = add_rule(g, "root", {std::move(root)});
  return g;
}

}  // namespace kiln::llm::tools
