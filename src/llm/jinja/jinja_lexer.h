// Jinja lexer: template text -> tokens, with the whitespace rules transformers renders chat
// templates with (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False) and the
// per-tag controls `{%-`, `-%}`, `{{-`, `-}}`, `{#-`, `-#}`, `{%+`, `+%}`. `{% raw %}` blocks and
// comments are resolved here: the parser sees data, `{{ }}` and `{% %}` tags only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kiln::llm::jinja {

enum class TokenType {
  kData,        // literal template text (already whitespace-controlled)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the decoded value (escapes resolved)
  kInt,
  kFloat,
  kOperator,    // + - * / // % ** ~ == != < > <= >= = . , : | ( ) [ ] { }
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  int line;    // 1-based
  int column;  // 1-based, in code points
};

// "chat template line L, column C: message" — every error the template machinery reports.
Status template_error(int line, int column, const std::string& message);

// Splits `source` into tokens. Errors (unterminated tags, strings or comments, stray
// characters) name the line and column.
Expected<std::vector<Token>> tokenize(std::string_view source);

}  // namespace kiln::llm::jinja
