// jinja::Value: the dynamic values a chat template computes with, with Python's semantics (a
// template's output must match Python jinja2 byte for byte): None, bool, int, float, str, list,
// tuple, dict (insertion ordered), jinja2's Undefined, namespace() objects and callables.
//
// Ownership: strings are held by value; lists and dicts are immutable once built and shared between
// copies (the sandbox forbids mutating them, as transformers' ImmutableSandboxedEnvironment does);
// a namespace is shared and mutable (`{% set ns.attr = ... %}` writes through every copy). A Value
// is safe to copy between threads as long as no namespace in it is written concurrently; compiled
// templates only hold literals, so rendering from several threads is safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"

namespace kiln::llm::jinja {

// Wide enough to detect 64-bit integer overflow in Python arithmetic.
__extension__ typedef __int128 Int128;

class Value;
class Interpreter;

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Expected<Value>(CallArgs& args, Interpreter& interp)>;

struct ValueList {
  std::vector<Value> items;
  bool is_tuple = false;
};

struct ValueDict {
  std::vector<std::pair<Value, Value>> items;  // insertion order, keys unique
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
};

// namespace(...): the one mutable object a template can write to.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

struct Callable {
  std::string name;  // for error messages
  NativeFunction fn;
};

// jinja2's default Undefined: falsy, renders as "", iterates as empty; most other uses fail
// with `hint` ("'foo' is undefined", "'dict object' has no attribute 'x'").
struct Undefined {
  std::string hint;
};

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

class Value {
 public:
  Value() : data_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Data(Undefined{std::move(hint)})); }
  static Value none() { return Value(Data(std::monostate{})); }
  Value(bool b) : data_(b) {}                               // NOLINT: implicit by design
  Value(int64_t i) : data_(i) {}                            // NOLINT
  Value(int i) : data_(static_cast<int64_t>(i)) {}          // NOLINT
  Value(double d) : data_(d) {}                             // NOLINT
  Value(std::string s) : data_(std::move(s)) {}             // NOLINT
  Value(const char* s) : data_(std::string(s)) {}           // NOLINT
  Value(std::string_view s) : data_(std::string(s)) {}      // NOLINT
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(std::vector<std::pair<Value, Value>> items);
  static Value ns(std::shared_ptr<Namespace> ns) { return Value(Data(std::move(ns))); }
  static Value function(std::string name, NativeFunction fn);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat || kind() == Kind::kBool; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;       // int or bool
  double as_double() const;     // int, bool or float
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ValueList& as_list() const { return *std::get<std::shared_ptr<const ValueList>>(data_); }
  const ValueDict& as_dict() const { return *std::get<std::shared_ptr<const ValueDict>>(data_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }

  // Python truthiness (Undefined is falsy).
  bool truthy() const;
  // Python type name as jinja2 prints it in messages: "str", "dict", "NoneType", ...
  std::string type_name() const;

 private:
  using Data = std::variant<Undefined, std::monostate, bool, int64_t, double, std::string,
                            std::shared_ptr<const ValueList>, std::shared_ptr<const ValueDict>,
                            std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>;
  explicit Value(Data d) : data_(std::move(d)) {}
  Data data_;
};

// Python ==, and hashing-free ordering (<) for sort/max/min. compare_less fails on types Python
// cannot order ("'<' not supported between instances of 'str' and 'int'").
bool values_equal(const Value& a, const Value& b);
Expected<bool> values_less(const Value& a, const Value& b);

// str(value) as jinja2 renders it: Undefined -> "", None -> "None", True -> "True",
// 1.0 -> "1.0", lists and dicts as Python's repr.
std::string to_str(const Value& value);
// repr(value): strings quoted as Python quotes them.
std::string to_repr(const Value& value);
// Python's repr of a float: shortest round-trip digits, "1e+16", "1e-05", "inf", "nan".
std::string format_float(double value);

// json.dumps(value, ensure_ascii=False, indent=indent, separators=(item_sep, key_sep),
// sort_keys=sort_keys), as transformers' tojson filter calls it. indent < 0: no indent.
Expected<std::string> to_json(const Value& value, int indent, std::string_view item_separator,
                              std::string_view key_separator, bool sort_keys);

// JSON -> Value (objects keep their key order) and the UTF-8 helpers the builtins share.
Value from_json(const nlohmann::ordered_json& json);
std::vector<uint32_t> utf8_decode(std::string_view text);  // invalid bytes decode as U+FFFD
std::string utf8_encode(const std::vector<uint32_t>& code_points);
void utf8_append(std::string& out, uint32_t code_point);
bool is_python_space(uint32_t code_point);  // str.isspace()

}  // namespace kiln::llm::jinja
