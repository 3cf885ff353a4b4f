// jinja2's builtin filters and tests, with transformers' tojson.
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <map>

#include "llm/jinja/jinja_builtins.h"
#include "llm/jinja/jinja_render.h"
#include "llm/jinja/jinja_string_ops.h"

namespace kiln::llm::jinja {
namespace {

using FilterFn = Expected<Value> (*)(const Value& input, CallArgs& args, Interpreter& interp);
using TestFn = Expected<bool> (*)(const Value& input, CallArgs& args, Interpreter& interp);

// Arguments after the first `skip` positional ones, as a fresh CallArgs (for map/select).
CallArgs rest_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

// jinja2's attribute getter: "a.b.0" walks attributes/items.
Expected<Value> get_path(const Value& item, const Value& path) {
  if (path.is_int()) return get_item(item, path);
  std::string p = to_str(path);
  Value current = item;
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    KILN_ASSIGN_OR_RETURN(current, numeric ? get_item(current, Value(static_cast<int64_t>(std::stoll(part))))
                                           : get_item(current, Value(part)));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

Expected<Value> as_list_value(const Value& input) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  return Value::list(std::move(items));
}

// Sort key: lower-cased strings unless case sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

Expected<std::vector<Value>> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) {
    Value key = item;
    if (!attribute.is_undefined() && !attribute.is_none()) {
      KILN_ASSIGN_OR_RETURN(key, get_path(item, attribute));
    }
    keyed.emplace_back(sort_key(key, case_sensitive), std::move(item));
  }
  Status error = Status::ok();
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto less = reverse ? values_less(b.first, a.first) : values_less(a.first, b.first);
    if (!less.has_value()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  KILN_RETURN_IF_ERROR(error);
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

Expected<Value> f_length(const Value& input, CallArgs&, Interpreter&) {
  switch (input.kind()) {
    case Kind::kUndefined: return Value(0);
    case Kind::kString: return Value(static_cast<int64_t>(py_len(input.as_string())));
    case Kind::kList: return Value(static_cast<int64_t>(input.as_list().items.size()));
    case Kind::kDict: return Value(static_cast<int64_t>(input.as_dict().items.size()));
    default: return invalid_argument("object of type '" + input.type_name() + "' has no len()");
  }
}

Expected<Value> f_default(const Value& input, CallArgs& args, Interpreter&) {
  Value fallback = arg(args, 0, "default_value", Value(""));
  bool boolean = arg(args, 1, "boolean", Value(false)).truthy();
  if (input.is_undefined() || (boolean && !input.truthy())) return fallback;
  return input;
}

Expected<Value> f_trim(const Value& input, CallArgs& args, Interpreter&) {
  Value chars = arg(args, 0, "chars", Value::none());
  std::optional<std::string> set;
  if (!chars.is_none()) set = to_str(chars);
  return Value(py_strip(to_str(input), set, true, true));
}

Expected<Value> f_upper(const Value& input, CallArgs&, Interpreter&) { return Value(py_upper(to_str(input))); }
Expected<Value> f_lower(const Value& input, CallArgs&, Interpreter&) { return Value(py_lower(to_str(input))); }
Expected<Value> f_capitalize(const Value& input, CallArgs&, Interpreter&) {
  return Value(py_capitalize(to_str(input)));
}

// jinja2's title: capitalise each piece after runs of whitespace, '-', '(', '{', '[' or '<'.
Expected<Value> f_title(const Value& input, CallArgs&, Interpreter&) {
  auto cps = utf8_decode(to_str(input));
  std::string out;
  std::vector<uint32_t> word;
  auto flush = [&] {
    if (word.empty()) return;
    std::string first = py_upper(utf8_encode({word[0]}));
    std::string rest = py_lower(utf8_encode(std::vector<uint32_t>(word.begin() + 1, word.end())));
    out += first + rest;
    word.clear();
  };
  for (uint32_t cp : cps) {
    bool sep = is_python_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (sep) {
      flush();
      utf8_append(out, cp);
    } else {
      word.push_back(cp);
    }
  }
  flush();
  return Value(std::move(out));
}

Expected<Value> f_replace(const Value& input, CallArgs& args, Interpreter& interp) {
  Value count = arg(args, 2, "count", Value::none());
  std::string out = py_replace(to_str(input), to_str(arg(args, 0, "old")), to_str(arg(args, 1, "new")),
                               count.is_none() ? -1 : count.as_int());
  KILN_RETURN_IF_ERROR(interp.check_size(out.size()));
  return Value(std::move(out));
}

Expected<Value> f_string(const Value& input, CallArgs&, Interpreter&) { return Value(to_str(input)); }

Expected<Value> f_list(const Value& input, CallArgs&, Interpreter&) { return as_list_value(input); }

Expected<Value> f_items(const Value& input, CallArgs&, Interpreter&) {
  if (input.is_undefined()) return Value::list({});
  if (!input.is_dict()) return invalid_argument("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, v] : input.as_dict().items) out.push_back(Value::list({k, v}, true));
  return Value::list(std::move(out));
}

Expected<Value> f_first(const Value& input, CallArgs&, Interpreter&) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Expected<Value> f_last(const Value& input, CallArgs&, Interpreter&) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Expected<Value> f_join(const Value& input, CallArgs& args, Interpreter& interp) {
  std::string sep = to_str(arg(args, 0, "d", Value("")));
  Value attribute = arg(args, 1, "attribute", Value::none());
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    Value item = items[i];
    if (!attribute.is_none()) {
      KILN_ASSIGN_OR_RETURN(item, get_path(item, attribute));
    }
    out += to_str(item);
    KILN_RETURN_IF_ERROR(interp.check_size(out.size()));
  }
  return Value(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Expected<Value> f_tojson(const Value& input, CallArgs& args, Interpreter& interp) {
  bool ensure_ascii = arg(args, 0, "ensure_ascii", Value(false)).truthy();
  Value indent_value = arg(args, 1, "indent", Value::none());
  Value separators = arg(args, 2, "separators", Value::none());
  bool sort_keys = arg(args, 3, "sort_keys", Value(false)).truthy();
  int indent = -1;
  if (!indent_value.is_none()) {
    if (!indent_value.is_int()) return unimplemented("tojson: only integer indents are supported");
    indent = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(indent_value.as_int(), 64)));
  }
  std::string item_sep = indent >= 0 ? "," : ", ";
  std::string key_sep = ": ";
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().items.size() != 2) {
      return invalid_argument("tojson: separators must be a pair of strings");
    }
    item_sep = to_str(separators.as_list().items[0]);
    key_sep = to_str(separators.as_list().items[1]);
  }
  KILN_ASSIGN_OR_RETURN(std::string text, to_json(input, indent, item_sep, key_sep, sort_keys));
  if (ensure_ascii) {
    std::string escaped;
    for (uint32_t cp : utf8_decode(text)) {
      if (cp < 0x80) {
        escaped += static_cast<char>(cp);
        continue;
      }
      auto unit = [&](uint32_t u) {
        char buf[16];
        std::snprintf(buf, sizeof(buf), "\\u%04x", u);
        escaped += buf;
      };
      if (cp >= 0x10000) {
        unit(0xD800 + ((cp - 0x10000) >> 10));
        unit(0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        unit(cp);
      }
    }
    text = std::move(escaped);
  }
  KILN_RETURN_IF_ERROR(interp.check_size(text.size()));
  return Value(std::move(text));
}

Expected<Value> f_indent(const Value& input, CallArgs& args, Interpreter& interp) {
  Value width = arg(args, 0, "width", Value(4));
  bool first = arg(args, 1, "first", Value(false)).truthy();
  bool blank = arg(args, 2, "blank", Value(false)).truthy();
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else if (width.is_int()) {
    indention.assign(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
  } else {
    return invalid_argument("indent: width must be an integer or a string");
  }
  auto lines = py_splitlines(to_str(input) + "\n");
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : indention) + lines[i];
  }
  if (first) out = indention + out;
  KILN_RETURN_IF_ERROR(interp.check_size(out.size()));
  return Value(std::move(out));
}

Expected<Value> f_int(const Value& input, CallArgs& args, Interpreter&) {
  Value fallback = arg(args, 0, "default", Value(0));
  switch (input.kind()) {
    case Kind::kBool:
    case Kind::kInt: return Value(input.as_int());
    case Kind::kFloat: {
      double d = input.as_double();
      if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return fallback;
      return Value(static_cast<int64_t>(d));
    }
    case Kind::kString: {
      std::string s = py_strip(input.as_string(), std::nullopt, true, true);
      std::string digits;
      for (char c : s) {
        if (c != '_') digits += c;
      }
      if (digits.empty()) return fallback;
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(digits.c_str(), &end, 10);
      if (errno == 0 && end != nullptr && *end == '\0') return Value(static_cast<int64_t>(v));
      double d = std::strtod(digits.c_str(), &end);
      if (end != nullptr && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) {
        return Value(static_cast<int64_t>(d));
      }
      return fallback;
    }
    default: return fallback;
  }
}

Expected<Value> f_float(const Value& input, CallArgs& args, Interpreter&) {
  Value fallback = arg(args, 0, "default", Value(0.0));
  if (input.is_number()) return Value(input.as_double());
  if (input.is_string()) {
    std::string s = py_strip(input.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end != nullptr && *end == '\0') return Value(d);
  }
  return fallback;
}

Expected<Value> f_abs(const Value& input, CallArgs&, Interpreter&) {
  if (input.kind() == Kind::kFloat) return Value(std::fabs(input.as_double()));
  if (input.is_number()) return Value(static_cast<int64_t>(std::llabs(input.as_int())));
  return invalid_argument("bad operand type for abs(): '" + input.type_name() + "'");
}

Expected<Value> f_round(const Value& input, CallArgs& args, Interpreter&) {
  int64_t precision = arg(args, 0, "precision", Value(0)).as_int();
  std::string method = to_str(arg(args, 1, "method", Value("common")));
  if (!input.is_number()) return invalid_argument("round: value must be a number");
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = input.as_double() * scale;
  double r = 0;
  if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else if (method == "common") {
    r = std::nearbyint(x);  // round half to even, as Python's round()
  } else {
    return invalid_argument("method must be common, ceil or floor");
  }
  return Value(r / scale);
}

Expected<Value> f_reverse(const Value& input, CallArgs&, Interpreter&) {
  if (input.is_string()) {
    auto cps = utf8_decode(input.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(utf8_encode(cps));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Expected<Value> f_sort(const Value& input, CallArgs& args, Interpreter&) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  KILN_ASSIGN_OR_RETURN(items, sorted(std::move(items), arg(args, 0, "reverse", Value(false)).truthy(),
                                      arg(args, 1, "case_sensitive", Value(false)).truthy(),
                                      arg(args, 2, "attribute", Value::none())));
  return Value::list(std::move(items));
}

Expected<Value> f_dictsort(const Value& input, CallArgs& args, Interpreter&) {
  if (!input.is_dict()) return invalid_argument("dictsort: value must be a mapping");
  bool case_sensitive = arg(args, 0, "case_sensitive", Value(false)).truthy();
  std::string by = to_str(arg(args, 1, "by", Value("key")));
  bool reverse = arg(args, 2, "reverse", Value(false)).truthy();
  std::vector<Value> pairs;
  for (const auto& [k, v] : input.as_dict().items) pairs.push_back(Value::list({k, v}, true));
  KILN_ASSIGN_OR_RETURN(pairs, sorted(std::move(pairs), reverse, case_sensitive, Value(by == "value" ? 1 : 0)));
  return Value::list(std::move(pairs));
}

Expected<Value> min_max(const Value& input, CallArgs& args, bool want_max) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  KILN_ASSIGN_OR_RETURN(items, sorted(std::move(items), want_max, arg(args, 0, "case_sensitive", Value(false)).truthy(),
                                      arg(args, 1, "attribute", Value::none())));
  return items.front();
}
Expected<Value> f_max(const Value& input, CallArgs& args, Interpreter&) { return min_max(input, args, true); }
Expected<Value> f_min(const Value& input, CallArgs& args, Interpreter&) { return min_max(input, args, false); }

Expected<Value> f_unique(const Value& input, CallArgs& args, Interpreter&) {
  bool case_sensitive = arg(args, 0, "case_sensitive", Value(false)).truthy();
  Value attribute = arg(args, 1, "attribute", Value::none());
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const auto& item : items) {
    Value key = item;
    if (!attribute.is_none()) {
      KILN_ASSIGN_OR_RETURN(key, get_path(item, attribute));
    }
    key = sort_key(key, case_sensitive);
    bool dup = false;
    for (const auto& s : seen) dup = dup || values_equal(s, key);
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Expected<Value> f_sum(const Value& input, CallArgs& args, Interpreter& interp) {
  Value attribute = arg(args, 0, "attribute", Value::none());
  Value total = arg(args, 1, "start", Value(0));
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  for (const auto& item : items) {
    Value v = item;
    if (!attribute.is_none()) {
      KILN_ASSIGN_OR_RETURN(v, get_path(item, attribute));
    }
    KILN_ASSIGN_OR_RETURN(total, binary_op("+", total, v, interp));
  }
  return total;
}

Expected<Value> f_map(const Value& input, CallArgs& args, Interpreter& interp) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  Value attribute = arg(args, 99, "attribute");
  std::vector<Value> out;
  if (!attribute.is_undefined()) {
    Value fallback = arg(args, 99, "default");
    for (const auto& item : items) {
      KILN_ASSIGN_OR_RETURN(Value v, get_path(item, attribute));
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) return invalid_argument("map requires a filter argument");
  std::string filter = to_str(args.positional[0]);
  for (const auto& item : items) {
    CallArgs rest = rest_args(args, 1);
    KILN_ASSIGN_OR_RETURN(Value v, interp.apply_filter(filter, item, rest));
    out.push_back(std::move(v));
  }
  return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr.
Expected<Value> select_impl(const Value& input, CallArgs& args, Interpreter& interp, bool by_attribute, bool keep) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  size_t first_test_arg = by_attribute ? 1 : 0;
  Value attribute = by_attribute ? arg(args, 0, "attribute") : Value();
  if (by_attribute && attribute.is_undefined()) return invalid_argument("missing parameter for attribute name");
  std::vector<Value> out;
  for (const auto& item : items) {
    Value subject = item;
    if (by_attribute) {
      KILN_ASSIGN_OR_RETURN(subject, get_path(item, attribute));
    }
    bool passed = false;
    if (args.positional.size() > first_test_arg) {
      CallArgs rest = rest_args(args, first_test_arg + 1);
      KILN_ASSIGN_OR_RETURN(passed, interp.apply_test(to_str(args.positional[first_test_arg]), subject, rest));
    } else {
      passed = subject.truthy();
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Expected<Value> f_select(const Value& in, CallArgs& a, Interpreter& i) { return select_impl(in, a, i, false, true); }
Expected<Value> f_reject(const Value& in, CallArgs& a, Interpreter& i) { return select_impl(in, a, i, false, false); }
Expected<Value> f_selectattr(const Value& in, CallArgs& a, Interpreter& i) { return select_impl(in, a, i, true, true); }
Expected<Value> f_rejectattr(const Value& in, CallArgs& a, Interpreter& i) { return select_impl(in, a, i, true, false); }

Expected<Value> f_attr(const Value& input, CallArgs& args, Interpreter&) {
  return get_attribute(input, to_str(arg(args, 0, "name")));
}

Expected<Value> f_escape(const Value& input, CallArgs&, Interpreter&) {
  std::string out;
  for (char c : to_str(input)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Expected<Value> f_safe(const Value& input, CallArgs&, Interpreter&) { return Value(to_str(input)); }

Expected<Value> f_center(const Value& input, CallArgs& args, Interpreter&) {
  std::string s = to_str(input);
  int64_t width = std::min<int64_t>(arg(args, 0, "width", Value(80)).as_int(), 1 << 16);
  auto len = static_cast<int64_t>(py_len(s));
  if (width <= len) return Value(s);
  int64_t pad = width - len;
  int64_t left = pad / 2 + (pad & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

Expected<Value> f_wordcount(const Value& input, CallArgs&, Interpreter&) {
  int64_t count = 0;
  bool in_word = false;
  for (uint32_t cp : utf8_decode(to_str(input))) {
    bool word_char = cp == '_' || (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
                     (cp >= 0x80 && !is_python_space(cp));
    if (word_char && !in_word) ++count;
    in_word = word_char;
  }
  return Value(count);
}

Expected<Value> f_batch(const Value& input, CallArgs& args, Interpreter&) {
  int64_t size = arg(args, 0, "linecount", Value(1)).as_int();
  if (size <= 0) return invalid_argument("batch: linecount must be positive");
  Value fill = arg(args, 1, "fill_with", Value::none());
  KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> out;
  std::vector<Value> current;
  for (auto& item : items) {
    current.push_back(std::move(item));
    if (static_cast<int64_t>(current.size()) == size) {
      out.push_back(Value::list(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (!fill.is_none()) {
      while (static_cast<int64_t>(current.size()) < size) current.push_back(fill);
    }
    out.push_back(Value::list(std::move(current)));
  }
  return Value::list(std::move(out));
}

Expected<Value> f_pprint(const Value& input, CallArgs&, Interpreter&) { return Value(to_repr(input)); }

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = {
      {"abs", f_abs},         {"attr", f_attr},         {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_length},      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},        {"escape", f_escape},     {"first", f_first},
      {"float", f_float},     {"forceescape", f_escape}, {"indent", f_indent},    {"int", f_int},
      {"items", f_items},     {"join", f_join},         {"last", f_last},         {"length", f_length},
      {"list", f_list},       {"lower", f_lower},       {"map", f_map},           {"max", f_max},
      {"min", f_min},         {"pprint", f_pprint},     {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},   {"round", f_round},       {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},     {"string", f_string},
      {"sum", f_sum},         {"title", f_title},       {"tojson", f_tojson},     {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

// ---- tests ----

Expected<bool> t_defined(const Value& v, CallArgs&, Interpreter&) { return !v.is_undefined(); }
Expected<bool> t_undefined(const Value& v, CallArgs&, Interpreter&) { return v.is_undefined(); }
Expected<bool> t_none(const Value& v, CallArgs&, Interpreter&) { return v.is_none(); }
Expected<bool> t_boolean(const Value& v, CallArgs&, Interpreter&) { return v.is_bool(); }
Expected<bool> t_true(const Value& v, CallArgs&, Interpreter&) { return v.is_bool() && v.as_bool(); }
Expected<bool> t_false(const Value& v, CallArgs&, Interpreter&) { return v.is_bool() && !v.as_bool(); }
Expected<bool> t_integer(const Value& v, CallArgs&, Interpreter&) { return v.is_int(); }
Expected<bool> t_float(const Value& v, CallArgs&, Interpreter&) { return v.kind() == Kind::kFloat; }
Expected<bool> t_number(const Value& v, CallArgs&, Interpreter&) { return v.is_number(); }
Expected<bool> t_string(const Value& v, CallArgs&, Interpreter&) { return v.is_string(); }
Expected<bool> t_mapping(const Value& v, CallArgs&, Interpreter&) { return v.is_dict(); }
Expected<bool> t_iterable(const Value& v, CallArgs&, Interpreter&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
Expected<bool> t_sequence(const Value& v, CallArgs& a, Interpreter& i) { return t_iterable(v, a, i); }
Expected<bool> t_callable(const Value& v, CallArgs&, Interpreter&) { return v.kind() == Kind::kCallable; }
Expected<bool> t_eq(const Value& v, CallArgs& a, Interpreter&) { return values_equal(v, arg(a, 0, "other")); }
Expected<bool> t_ne(const Value& v, CallArgs& a, Interpreter&) { return !values_equal(v, arg(a, 0, "other")); }
Expected<bool> t_lt(const Value& v, CallArgs& a, Interpreter&) { return values_less(v, arg(a, 0, "other")); }
Expected<bool> t_gt(const Value& v, CallArgs& a, Interpreter&) { return values_less(arg(a, 0, "other"), v); }
Expected<bool> t_le(const Value& v, CallArgs& a, Interpreter& i) {
  KILN_ASSIGN_OR_RETURN(bool gt, t_gt(v, a, i));
  return !gt;
}
Expected<bool> t_ge(const Value& v, CallArgs& a, Interpreter& i) {
  KILN_ASSIGN_OR_RETURN(bool lt, t_lt(v, a, i));
  return !lt;
}
Expected<bool> t_sameas(const Value& v, CallArgs& a, Interpreter&) {
  Value other = arg(a, 0, "other");
  if (v.kind() != other.kind()) return false;
  return values_equal(v, other);
}
Expected<bool> t_in(const Value& v, CallArgs& a, Interpreter&) { return contains(arg(a, 0, "seq"), v); }
Expected<bool> t_divisibleby(const Value& v, CallArgs& a, Interpreter&) {
  Value n = arg(a, 0, "num");
  if (!v.is_number() || !n.is_number()) return invalid_argument("divisibleby expects numbers");
  if (n.as_double() == 0) return invalid_argument("integer modulo by zero");
  if (v.kind() == Kind::kFloat || n.kind() == Kind::kFloat) return std::fmod(v.as_double(), n.as_double()) == 0;
  return v.as_int() % n.as_int() == 0;
}
Expected<bool> t_even(const Value& v, CallArgs&, Interpreter&) {
  if (!v.is_number()) return invalid_argument("even expects a number");
  return v.as_int() % 2 == 0;
}
Expected<bool> t_odd(const Value& v, CallArgs&, Interpreter&) {
  if (!v.is_number()) return invalid_argument("odd expects a number");
  return v.as_int() % 2 != 0;
}
Expected<bool> t_lower(const Value& v, CallArgs&, Interpreter&) {
  std::string s = to_str(v);
  return py_lower(s) == s;
}
Expected<bool> t_upper(const Value& v, CallArgs&, Interpreter&) {
  std::string s = to_str(v);
  return py_upper(s) == s;
}
Expected<bool> t_escaped(const Value&, CallArgs&, Interpreter&) { return false; }
Expected<bool> t_filter(const Value& v, CallArgs&, Interpreter&) { return v.is_string() && has_filter(v.as_string()); }
Expected<bool> t_test(const Value& v, CallArgs&, Interpreter&) { return v.is_string() && has_test(v.as_string()); }

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
      {"eq", t_eq},           {"equalto", t_eq},        {"escaped", t_escaped}, {"even", t_even},
      {"false", t_false},     {"filter", t_filter},     {"float", t_float},     {"ge", t_ge},
      {"greaterthan", t_gt},  {"gt", t_gt},             {"in", t_in},           {"integer", t_integer},
      {"iterable", t_iterable}, {"le", t_le},           {"lessthan", t_lt},     {"lower", t_lower},
      {"lt", t_lt},           {"mapping", t_mapping},   {"ne", t_ne},           {"none", t_none},
      {"number", t_number},   {"odd", t_odd},           {"sameas", t_sameas},   {"sequence", t_sequence},
      {"string", t_string},   {"test", t_test},         {"true", t_true},       {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}

}  // namespace

bool has_filter(std::string_view name) { return filters().count(name) != 0; }
bool has_test(std::string_view name) { return tests().count(name) != 0; }

Expected<Value> call_filter(const std::string& name, const Value& input, CallArgs& args, Interpreter& interp) {
  auto it = filters().find(name);
  if (it == filters().end()) return invalid_argument("unknown filter '" + name + "'");
  return it->second(input, args, interp);
}

Expected<bool> call_test(const std::string& name, const Value& input, CallArgs& args, Interpreter& interp) {
  auto it = tests().find(name);
  if (it == tests().end()) return invalid_argument("unknown test '" + name + "'");
  return it->second(input, args, interp);
}

}  // namespace kiln::llm::jinja
