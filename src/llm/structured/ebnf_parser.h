// The text grammar of structured outputs' `grammar` field: an EBNF in the style of llama.cpp's
// GBNF, over UTF-8 text. docs/structured-outputs.md is its reference:
//   root   ::= "{" ws pair (ws "," ws pair)* ws "}"     # a rule; `root` is where output starts
//   pair   ::= key ws ":" ws [0-9]+
//   key    ::= "\"" [a-z_]{1,16} "\""
//   ws     ::= [ \t\n]{0,4}
// Terms: "literal" (escapes \" \\ \n \t \r \xHH \uHHHH), a class [...] / [^...] and `.` as in
// regex_parser.h, a rule name, a group ( ... ); each may take * + ? {m} {m,} {m,n}; `|`
// separates alternatives; `#` starts a comment to the end of the line. A rule runs until the
// next `name ::=`. Errors give the line and column.
#pragma once

#include <string_view>

#include "base/status.h"
#include "llm/structured/grammar.h"

namespace kiln::llm::structured {

Expected<Grammar> parse_ebnf(std::string_view text);

}  // namespace kiln::llm::structured
