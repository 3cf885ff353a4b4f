// Jinja parser: tokens -> syntax tree, following jinja2's grammar and operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary - + < filters, tests, calls,
// attribute and item access). Filters and tests are checked against the interpreter's tables
// here, so a template naming an unknown one fails to compile, with its line and column.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "llm/jinja/jinja_ast.h"
#include "llm/jinja/jinja_lexer.h"

namespace kiln::llm::jinja {

// Nesting (blocks inside blocks, parentheses inside parentheses) is capped so that hostile
// templates cannot exhaust the stack.
inline constexpr int kMaxParseDepth = 128;

Expected<Body> parse_template(std::string_view source);

}  // namespace kiln::llm::jinja
