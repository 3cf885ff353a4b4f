// Python str operations on UTF-8 text, code point by code point as Python does them: the methods
// a template calls on strings (`s.strip()`, `s.split(',')`, ...) and the helpers jinja2's string
// filters are built from.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "llm/jinja/jinja_value.h"

namespace kiln::llm::jinja {

bool is_string_method(std::string_view name);
Expected<Value> call_string_method(const std::string& self, const std::string& name, CallArgs& args);

// str.strip/lstrip/rstrip(chars); no chars: Unicode whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
// str.replace(old, new, count); count < 0: all.
std::string py_replace(const std::string& s, const std::string& old_text, const std::string& new_text,
                       int64_t count);
std::vector<std::string> py_splitlines(const std::string& s);
size_t py_len(const std::string& s);  // code points

}  // namespace kiln::llm::jinja
