#include "llm/jinja/jinja_value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace kiln::llm::jinja {

const Value* ValueDict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* Namespace::find(std::string_view name) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Namespace::set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto list = std::make_shared<ValueList>();
  list->items = std::move(items);
  list->is_tuple = is_tuple;
  return Value(Data(std::shared_ptr<const ValueList>(std::move(list))));
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  auto dict = std::make_shared<ValueDict>();
  dict->items = std::move(items);
  return Value(Data(std::shared_ptr<const ValueDict>(std::move(dict))));
}

Value Value::function(std::string name, NativeFunction fn) {
  auto callable = std::make_shared<Callable>();
  callable->name = std::move(name);
  callable->fn = std::move(fn);
  return Value(Data(std::shared_ptr<const Callable>(std::move(callable))));
}

Kind Value::kind() const {
  switch (data_.index()) {
    case 0: return Kind::kUndefined;
    case 1: return Kind::kNone;
    case 2: return Kind::kBool;
    case 3: return Kind::kInt;
    case 4: return Kind::kFloat;
    case 5: return Kind::kString;
    case 6: return Kind::kList;
    case 7: return Kind::kDict;
    case 8: return Kind::kNamespace;
    default: return Kind::kCallable;
  }
}

int64_t Value::as_int() const {
  if (kind() == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (kind() == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_double() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().items.empty();
    case Kind::kDict: return !as_dict().items.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return as_list().is_tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    default: return "function";
  }
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.as_string() == b.as_string();
    case Kind::kList: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (other == nullptr || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return &a.as_namespace() == &b.as_namespace();
    case Kind::kCallable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

Expected<bool> values_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // code point order
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return values_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return invalid_argument("'<' not supported between instances of '" + a.type_name() + "' and '" +
                          b.type_name() + "'");
}

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+02"
  bool negative = !sci.empty() && sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) {
    return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  }
  auto int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::vector<uint32_t> utf8_decode(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  auto left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      n = 1;
    } else {
      out.push_back(static_cast<uint32_t>(cp));
    }
    p += n;
    left -= n;
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string utf8_encode(const std::vector<uint32_t>& code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (uint32_t cp : code_points) utf8_append(out, cp);
  return out;
}

bool is_python_space(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return true;
  if (cp < 0x80) return false;
  if (cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a)) return true;
  return cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

namespace {

bool python_printable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : utf8_decode(s)) {
    char buf[16];
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (python_printable(cp)) {
      utf8_append(out, cp);
    } else {
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
      }
      out += buf;
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string to_repr(const Value& value) {
  switch (value.kind()) {
    case Kind::kString: return repr_string(value.as_string());
    case Kind::kList: {
      const auto& list = value.as_list();
      std::string out = list.is_tuple ? "(" : "[";
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += to_repr(list.items[i]);
      }
      if (list.is_tuple && list.items.size() == 1) out += ",";
      return out + (list.is_tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : value.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += to_repr(k) + ": " + to_repr(v);
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : value.as_namespace().attrs) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + to_repr(v);
      }
      return out + "}>";
    }
    default: return to_str(value);
  }
}

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return value.as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(value.as_int());
    case Kind::kFloat: return format_float(value.as_double());
    case Kind::kString: return value.as_string();
    case Kind::kCallable: return "<function " + value.as_callable().name + ">";
    default: return to_repr(value);
  }
}

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return format_float(d);
}

struct JsonWriter {
  int indent;
  std::string_view item_sep;
  std::string_view key_sep;
  bool sort_keys;
  std::string out;

  void newline(int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  }

  Status key(const Value& k) {
    switch (k.kind()) {
      case Kind::kString: json_string(out, k.as_string()); return Status::ok();
      case Kind::kBool: out += k.as_bool() ? "\"true\"" : "\"false\""; return Status::ok();
      case Kind::kNone: out += "\"null\""; return Status::ok();
      case Kind::kInt: out += "\"" + std::to_string(k.as_int()) + "\""; return Status::ok();
      case Kind::kFloat: out += "\"" + json_float(k.as_double()) + "\""; return Status::ok();
      default:
        return invalid_argument("keys must be str, int, float, bool or None, not " + k.type_name());
    }
  }

  Status write(const Value& v, int level) {
    if (level > 512) return invalid_argument("tojson: value nested too deeply");
    switch (v.kind()) {
      case Kind::kNone: out += "null"; return Status::ok();
      case Kind::kBool: out += v.as_bool() ? "true" : "false"; return Status::ok();
      case Kind::kInt: out += std::to_string(v.as_int()); return Status::ok();
      case Kind::kFloat: out += json_float(v.as_double()); return Status::ok();
      case Kind::kString: json_string(out, v.as_string()); return Status::ok();
      case Kind::kList: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out += "[]";
          return Status::ok();
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_sep;
          if (indent >= 0) newline(level + 1);
          KILN_RETURN_IF_ERROR(write(items[i], level + 1));
        }
        if (indent >= 0) newline(level);
        out += ']';
        return Status::ok();
      }
      case Kind::kDict: {
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& item : v.as_dict().items) items.push_back(&item);
        if (items.empty()) {
          out += "{}";
          return Status::ok();
        }
        if (sort_keys) {
          Status error = Status::ok();
          std::stable_sort(items.begin(), items.end(), [&](const auto* a, const auto* b) {
            auto less = values_less(a->first, b->first);
            if (!less.has_value()) {
              error = less.status();
              return false;
            }
            return *less;
          });
          KILN_RETURN_IF_ERROR(error);
        }
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += item_sep;
          if (indent >= 0) newline(level + 1);
          KILN_RETURN_IF_ERROR(key(items[i]->first));
          out += key_sep;
          KILN_RETURN_IF_ERROR(write(items[i]->second, level + 1));
        }
        if (indent >= 0) newline(level);
        out += '}';
        return Status::ok();
      }
      default:
        return invalid_argument("Object of type " + v.type_name() + " is not JSON serializable");
    }
  }
};

}  // namespace

Expected<std::string> to_json(const Value& value, int indent, std::string_view item_separator,
                              std::string_view key_separator, bool sort_keys) {
  JsonWriter writer{indent, item_separator, key_separator, sort_keys, {}};
  KILN_RETURN_IF_ERROR(writer.write(value, 0));
  return std::move(writer.out);
}

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(json.size());
      for (const auto& [k, v] : json.items()) items.emplace_back(Value(k), from_json(v));
      return Value::dict(std::move(items));
    }
    default: return Value::none();  // binary and discarded values do not occur in parsed JSON
  }
}

}  // namespace kiln::llm::jinja
