// Attribute and item access, Python methods of str/dict/list values, iteration and the globals.
#include <utf8proc.h>

#include <algorithm>
#include <ctime>
#include <set>

#include "llm/jinja/jinja_builtins.h"
#include "llm/jinja/jinja_render.h"
#include "llm/jinja/jinja_string_ops.h"

namespace kiln::llm::jinja {
namespace {

// jinja2's ImmutableSandboxedEnvironment refuses these before they can be called.
const std::set<std::string, std::less<>> kUnsafeDictMethods = {"clear", "pop", "popitem", "setdefault", "update"};
const std::set<std::string, std::less<>> kUnsafeListMethods = {"append", "clear", "extend", "insert",
                                                               "pop",    "remove", "reverse", "sort"};

std::string object_description(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.type_name() + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + object_description(obj) + "' has no attribute '" + name + "'");
}

Status unsafe(const Value& obj, const std::string& name) {
  return invalid_argument("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

Value method(const Value& self, const std::string& name,
             Expected<Value> (*fn)(const Value& self, const std::string& name, CallArgs& args)) {
  return Value::function(name, [self, name, fn](CallArgs& args, Interpreter&) { return fn(self, name, args); });
}

Expected<Value> dict_method(const Value& self, const std::string& name, CallArgs& args) {
  const ValueDict& dict = self.as_dict();
  if (name == "get") {
    if (args.positional.empty()) return invalid_argument("get expected at least 1 argument, got 0");
    const Value* found = dict.find(args.positional[0]);
    if (found != nullptr) return *found;
    return args.positional.size() > 1 ? args.positional[1] : Value::none();
  }
  std::vector<Value> out;
  for (const auto& [k, v] : dict.items) {
    if (name == "keys") {
      out.push_back(k);
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::list({k, v}, true));
    }
  }
  if (name == "copy") return self;
  return Value::list(std::move(out));
}

Expected<Value> list_method(const Value& self, const std::string& name, CallArgs& args) {
  const auto& items = self.as_list().items;
  if (args.positional.empty()) return invalid_argument(name + "() takes exactly one argument (0 given)");
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!values_equal(items[i], args.positional[0])) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return invalid_argument(to_repr(args.positional[0]) + " is not in list");
  return Value(count);
}

Expected<Value> string_method(const Value& self, const std::string& name, CallArgs& args) {
  return call_string_method(self.as_string(), name, args);
}

}  // namespace

Value arg(const CallArgs& args, size_t index, std::string_view name, Value fallback) {
  if (index < args.positional.size()) return args.positional[index];
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return v;
  }
  return fallback;
}

Expected<Value> get_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kUndefined: return undefined_error(obj);
    case Kind::kDict: {
      if (name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy") {
        return method(obj, name, dict_method);
      }
      if (kUnsafeDictMethods.count(name) != 0) return unsafe(obj, name);
      const Value* found = obj.as_dict().find(std::string_view(name));
      if (found != nullptr) return *found;
      return missing_attribute(obj, name);
    }
    case Kind::kList: {
      if (name == "index" || name == "count") return method(obj, name, list_method);
      if (!obj.as_list().is_tuple && kUnsafeListMethods.count(name) != 0) return unsafe(obj, name);
      return missing_attribute(obj, name);
    }
    case Kind::kString: {
      if (is_string_method(name)) return method(obj, name, string_method);
      return missing_attribute(obj, name);
    }
    case Kind::kNamespace: {
      const Value* found = obj.as_namespace().find(name);
      if (found != nullptr) return *found;
      return missing_attribute(obj, name);
    }
    default: return missing_attribute(obj, name);
  }
}

Expected<Value> get_item(const Value& obj, const Value& key) {
  auto index_of = [&](int64_t size) -> std::optional<size_t> {
    if (!key.is_int() && !key.is_bool()) return std::nullopt;
    int64_t i = key.as_int();
    if (i < 0) i += size;
    if (i < 0 || i >= size) return std::nullopt;
    return static_cast<size_t>(i);
  };
  switch (obj.kind()) {
    case Kind::kUndefined: return undefined_error(obj);
    case Kind::kDict: {
      const Value* found = obj.as_dict().find(key);
      if (found != nullptr) return *found;
      break;
    }
    case Kind::kList: {
      const auto& items = obj.as_list().items;
      auto i = index_of(static_cast<int64_t>(items.size()));
      if (i) return items[*i];
      break;
    }
    case Kind::kString: {
      auto cps = utf8_decode(obj.as_string());
      auto i = index_of(static_cast<int64_t>(cps.size()));
      if (i) return Value(utf8_encode({cps[*i]}));
      break;
    }
    default: break;
  }
  if (key.is_string()) {
    KILN_ASSIGN_OR_RETURN(Value attr, get_attribute(obj, key.as_string()));
    return attr;
  }
  return Value::undefined("'" + object_description(obj) + "' has no element " + to_repr(key));
}

Expected<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return undefined_error(obj);
  auto to_index = [](const Value& v, int64_t fallback) -> Expected<int64_t> {
    if (v.is_none()) return fallback;
    if (!v.is_int() && !v.is_bool()) {
      return invalid_argument("slice indices must be integers or None or have an __index__ method");
    }
    return v.as_int();
  };
  std::vector<Value> items;
  std::vector<uint32_t> cps;
  int64_t length = 0;
  if (obj.is_list()) {
    length = static_cast<int64_t>(obj.as_list().items.size());
  } else if (obj.is_string()) {
    cps = utf8_decode(obj.as_string());
    length = static_cast<int64_t>(cps.size());
  } else {
    return invalid_argument("'" + obj.type_name() + "' object is not subscriptable");
  }
  KILN_ASSIGN_OR_RETURN(int64_t st, to_index(step, 1));
  if (st == 0) return invalid_argument("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, bool is_start) -> Expected<int64_t> {
    int64_t lower = st < 0 ? -1 : 0;
    int64_t upper = st < 0 ? length - 1 : length;
    if (v.is_none()) return (st < 0) == is_start ? upper : lower;
    KILN_ASSIGN_OR_RETURN(int64_t i, to_index(v, 0));
    if (i < 0) {
      i += length;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  KILN_ASSIGN_OR_RETURN(int64_t begin, adjust(start, true));
  KILN_ASSIGN_OR_RETURN(int64_t end, adjust(stop, false));
  std::vector<size_t> picks;
  for (int64_t i = begin; st > 0 ? i < end : i > end; i += st) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::vector<uint32_t> out;
    for (size_t i : picks) out.push_back(cps[i]);
    return Value(utf8_encode(out));
  }
  for (size_t i : picks) items.push_back(obj.as_list().items[i]);
  return Value::list(std::move(items), obj.as_list().is_tuple);
}

Expected<std::vector<Value>> iterate(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined: return std::vector<Value>{};
    case Kind::kList: return value.as_list().items;
    case Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, v] : value.as_dict().items) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (uint32_t cp : utf8_decode(value.as_string())) chars.emplace_back(utf8_encode({cp}));
      return chars;
    }
    default: return invalid_argument("'" + value.type_name() + "' object is not iterable");
  }
}

std::vector<std::pair<std::string, Value>> make_globals() {
  std::vector<std::pair<std::string, Value>> globals;
  globals.emplace_back("range", Value::function("range", [](CallArgs& args, Interpreter&) -> Expected<Value> {
    std::vector<int64_t> bounds;
    for (const auto& a : args.positional) {
      if (!a.is_int() && !a.is_bool()) {
        return invalid_argument("'" + a.type_name() + "' object cannot be interpreted as an integer");
      }
      bounds.push_back(a.as_int());
    }
    if (bounds.empty() || bounds.size() > 3) return invalid_argument("range expected 1 to 3 arguments");
    int64_t start = bounds.size() == 1 ? 0 : bounds[0];
    int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
    int64_t step = bounds.size() == 3 ? bounds[2] : 1;
    if (step == 0) return invalid_argument("range() arg 3 must not be zero");
    // The sandbox's MAX_RANGE.
    constexpr int64_t kMaxRange = 100000;
    Int128 count = step > 0 ? (static_cast<Int128>(stop) - start + step - 1) / step
                              : (static_cast<Int128>(start) - stop - step - 1) / -step;
    if (count > kMaxRange) {
      return invalid_argument("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.emplace_back(start + i * step);
    return Value::list(std::move(items));
  }));
  globals.emplace_back("dict", Value::function("dict", [](CallArgs& args, Interpreter&) -> Expected<Value> {
    std::vector<std::pair<Value, Value>> items;
    if (!args.positional.empty()) {
      if (!args.positional[0].is_dict()) return invalid_argument("dict() expects a mapping or keyword arguments");
      items = args.positional[0].as_dict().items;
    }
    for (auto& [k, v] : args.keyword) items.emplace_back(Value(k), v);
    return Value::dict(std::move(items));
  }));
  globals.emplace_back("namespace", Value::function("namespace", [](CallArgs& args, Interpreter&) -> Expected<Value> {
    auto ns = std::make_shared<Namespace>();
    for (const auto& a : args.positional) {
      if (!a.is_dict()) return invalid_argument("namespace() expects a mapping or keyword arguments");
      for (const auto& [k, v] : a.as_dict().items) ns->set(to_str(k), v);
    }
    for (auto& [k, v] : args.keyword) ns->set(k, v);
    return Value::ns(std::move(ns));
  }));
  globals.emplace_back("raise_exception",
                       Value::function("raise_exception", [](CallArgs& args, Interpreter&) -> Expected<Value> {
                         return invalid_argument(to_str(arg(args, 0, "message", Value(""))));
                       }));
  globals.emplace_back("strftime_now", Value::function("strftime_now", [](CallArgs& args, Interpreter&) -> Expected<Value> {
    Value format = arg(args, 0, "format");
    if (!format.is_string()) return invalid_argument("strftime_now() expects a format string");
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string buf(256 + format.as_string().size() * 8, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), format.as_string().c_str(), &local);
    buf.resize(n);
    return Value(std::move(buf));
  }));
  return globals;
}

}  // namespace kiln::llm::jinja
