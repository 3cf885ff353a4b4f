// The library a chat template can call: jinja2's builtin filters and tests (with transformers'
// tojson), Python methods on str/dict/list values, attribute and item access with jinja2's
// getattr/getitem fallbacks and the immutable sandbox's refusals, and the globals (range, dict,
// namespace, raise_exception, strftime_now). All stateless; the Interpreter passed in only
// serves callbacks (map/select applying other filters and tests) and size limits.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "llm/jinja/jinja_value.h"

namespace kiln::llm::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Expected<Value> call_filter(const std::string& name, const Value& input, CallArgs& args, Interpreter& interp);
Expected<bool> call_test(const std::string& name, const Value& input, CallArgs& args, Interpreter& interp);

// obj.name: Python attributes (methods) first, then items; missing -> Undefined.
Expected<Value> get_attribute(const Value& obj, const std::string& name);
// obj[key]: items first, then attributes for string keys; missing -> Undefined.
Expected<Value> get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on lists, tuples and strings (null Values = omitted).
Expected<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The values a `for` loop visits: list items, dict keys, string characters; Undefined -> none.
Expected<std::vector<Value>> iterate(const Value& value);

std::vector<std::pair<std::string, Value>> make_globals();

// Argument helpers shared by builtins: positional index or keyword name, else `fallback`.
Value arg(const CallArgs& args, size_t index, std::string_view name, Value fallback = Value());

}  // namespace kiln::llm::jinja
