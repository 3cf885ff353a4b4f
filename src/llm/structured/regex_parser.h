// Regular expressions as grammar expressions, for JSON Schema's `pattern` and the `regex` of
// structured outputs. The subset: literal characters (UTF-8), escapes (\d \D \w \W \s \S, \n \t
// \r \f \v \0, \xHH, \uHHHH, \u{H...}, an escaped punctuation character), classes [...] and [^...]
// with ranges and the escapes above, `.` (any character but a newline), groups (...), (?:...)
// and (?<name>...), alternation |, and the quantifiers * + ? {m} {m,} {m,n} (a lazy `?` after
// one is accepted: it changes nothing for a constraint). The whole output must match: `^` at the
// start and `$` at the end are accepted and change nothing, anywhere else they are refused, as
// are backreferences, lookaround and \b. Errors name the offset in the pattern.
#pragma once

#include <string_view>

#include "base/status.h"
#include "llm/structured/grammar.h"

namespace kiln::llm::structured {

// `pattern` as an expression over the UTF-8 bytes of the text it matches. json_string: over the
// text as written inside a JSON string (see codepoint_set_expr).
Expected<Expr> regex_to_expr(std::string_view pattern, bool json_string);

// A grammar whose language is the text `pattern` matches.
Expected<Grammar> regex_grammar(std::string_view pattern);

}  // namespace kiln::llm::structured
