// JSON Schema -> grammar, for `response_format` json_schema and structured outputs' `json`: the
// subset that OpenAI's structured outputs, pydantic and zod emit, each keyword enforced by the
// grammar itself (docs/structured-outputs.md lists them and how). Objects write their properties
// in the schema's order. Whitespace is bounded so that a model cannot loop on it: after '{', '['
// and ',' and before '}' and ']' nothing, one space, or a newline and at most 20 spaces; after
// ':' nothing or one space; nowhere else. A keyword outside the subset is an
// error naming it and its path, never ignored.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "llm/structured/grammar.h"

namespace kiln::llm::structured {

// `schema_json`: the schema's JSON text, its object members in their written order. `path`
// prefixes the location in error messages ("response_format.json_schema.schema").
Expected<Grammar> json_schema_grammar(std::string_view schema_json, const std::string& path);

// Any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace kiln::llm::structured
