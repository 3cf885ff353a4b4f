#include "llm/jinja/jinja_string_ops.h"

#include <utf8proc.h>

#include <algorithm>
#include <set>

#include "llm/jinja/jinja_builtins.h"

namespace kiln::llm::jinja {
namespace {

bool is_cased(uint32_t cp) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
uint32_t to_upper(uint32_t cp) { return static_cast<uint32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))); }
uint32_t to_lower(uint32_t cp) { return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))); }
uint32_t to_title(uint32_t cp) { return static_cast<uint32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))); }

bool is_line_break(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
         cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

Expected<std::string> str_arg(const CallArgs& args, size_t index, std::string_view name, const std::string& method) {
  Value v = arg(args, index, name);
  if (!v.is_string()) {
    return invalid_argument(method + "() argument must be str, not " + v.type_name());
  }
  return v.as_string();
}

Expected<std::optional<std::string>> optional_chars(const CallArgs& args, const std::string& method) {
  Value v = arg(args, 0, "chars", Value::none());
  if (v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) return invalid_argument(method + " arg must be None or str");
  return std::optional<std::string>(v.as_string());
}

// str.split(sep, maxsplit) / str.rsplit.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (!sep) {
    auto cps = utf8_decode(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_python_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = cps.size();
        while (end > i && is_python_space(cps[end - 1])) --end;
        parts.emplace_back(utf8_encode(std::vector<uint32_t>(cps.begin() + static_cast<long>(i), cps.begin() + static_cast<long>(end))));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_python_space(cps[j])) ++j;
      parts.emplace_back(utf8_encode(std::vector<uint32_t>(cps.begin() + static_cast<long>(i), cps.begin() + static_cast<long>(j))));
      i = j;
    }
    if (from_right) {
      for (auto& p : parts) {
        auto pc = utf8_decode(p);
        std::reverse(pc.begin(), pc.end());
        p = utf8_encode(pc);
      }
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t found = s.find(*sep, pos);
      if (found == std::string::npos) break;
      parts.push_back(s.substr(pos, found - pos));
      pos = found + sep->size();
    }
    parts.push_back(s.substr(pos));
    return parts;
  }
  size_t end = s.size();
  std::vector<std::string> rev;
  while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t found = s.rfind(*sep, end - sep->size());
    if (found == std::string::npos) break;
    rev.push_back(s.substr(found + sep->size(), end - found - sep->size()));
    end = found;
  }
  rev.push_back(s.substr(0, end));
  std::reverse(rev.begin(), rev.end());
  return rev;
}

// str.format with automatic ({}) and explicit ({0}, {name}) fields; no format specs.
Expected<std::string> py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return invalid_argument("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) return invalid_argument("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) {
      return unimplemented("format specifications in str.format are not supported");
    }
    Value value;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) return invalid_argument("Replacement index out of range");
      value = args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = std::stoul(field);
      if (index >= args.positional.size()) return invalid_argument("Replacement index out of range");
      value = args.positional[index];
    } else {
      bool found = false;
      for (const auto& [k, v] : args.keyword) {
        if (k == field) {
          value = v;
          found = true;
        }
      }
      if (!found) return invalid_argument("KeyError: '" + field + "'");
    }
    out += to_str(value);
    i = close;
  }
  return out;
}

template <typename Pred>
bool all_code_points(const std::string& s, Pred pred) {
  auto cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

const std::set<std::string, std::less<>> kStringMethods = {
    "strip",     "lstrip",    "rstrip",  "split",    "rsplit",       "startswith",   "endswith",
    "replace",   "upper",     "lower",   "title",    "capitalize",   "format",       "join",
    "find",      "rfind",     "count",   "isdigit",  "isalpha",      "isalnum",      "isspace",
    "isupper",   "islower",   "splitlines", "removeprefix", "removesuffix", "swapcase", "index"};

}  // namespace

size_t py_len(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<uint32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_python_space(cp);
  };
  size_t begin = 0;
  size_t end = cps.size();
  if (left) {
    while (begin < end && strip_it(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(cps[end - 1])) --end;
  }
  return utf8_encode(std::vector<uint32_t>(cps.begin() + static_cast<long>(begin), cps.begin() + static_cast<long>(end)));
}

std::string py_upper(const std::string& s) {
  auto cps = utf8_decode(s);
  for (auto& cp : cps) cp = to_upper(cp);
  return utf8_encode(cps);
}

std::string py_lower(const std::string& s) {
  auto cps = utf8_decode(s);
  for (auto& cp : cps) cp = to_lower(cp);
  return utf8_encode(cps);
}

std::string py_capitalize(const std::string& s) {
  auto cps = utf8_decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_title(cps[i]) : to_lower(cps[i]);
  return utf8_encode(cps);
}

std::string py_replace(const std::string& s, const std::string& old_text, const std::string& new_text,
                       int64_t count) {
  std::string out;
  if (old_text.empty()) {
    auto cps = utf8_decode(s);
    int64_t done = 0;
    for (uint32_t cp : cps) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      utf8_append(out, cp);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = s.find(old_text, pos);
    if (found == std::string::npos) break;
    out.append(s, pos, found - pos);
    out += new_text;
    pos = found + old_text.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  auto cps = utf8_decode(s);
  std::vector<uint32_t> line;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) {
      line.push_back(cps[i]);
      continue;
    }
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(utf8_encode(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(utf8_encode(line));
  return lines;
}

bool is_string_method(std::string_view name) { return kStringMethods.count(name) != 0; }

Expected<Value> call_string_method(const std::string& self, const std::string& name, CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    KILN_ASSIGN_OR_RETURN(auto chars, optional_chars(args, name));
    return Value(py_strip(self, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Value sep = arg(args, 0, "sep", Value::none());
    Value maxsplit = arg(args, 1, "maxsplit", Value(-1));
    if (!sep.is_none() && !sep.is_string()) return invalid_argument("must be str or None, not " + sep.type_name());
    if (sep.is_string() && sep.as_string().empty()) return invalid_argument("empty separator");
    if (!maxsplit.is_int()) return invalid_argument("maxsplit must be an integer");
    std::optional<std::string> sep_text;
    if (sep.is_string()) sep_text = sep.as_string();
    std::vector<Value> parts;
    for (auto& p : py_split(self, sep_text, maxsplit.as_int(), name == "rsplit")) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    Value what = arg(args, 0, "prefix");
    std::vector<Value> options = what.is_list() ? what.as_list().items : std::vector<Value>{what};
    for (const auto& o : options) {
      if (!o.is_string()) {
        return invalid_argument(name + " first arg must be str or a tuple of str, not " + o.type_name());
      }
      const std::string& t = o.as_string();
      bool hit = name == "startswith" ? self.compare(0, t.size(), t) == 0 && self.size() >= t.size()
                                      : self.size() >= t.size() && self.compare(self.size() - t.size(), t.size(), t) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "replace") {
    KILN_ASSIGN_OR_RETURN(std::string old_text, str_arg(args, 0, "old", name));
    KILN_ASSIGN_OR_RETURN(std::string new_text, str_arg(args, 1, "new", name));
    Value count = arg(args, 2, "count", Value(-1));
    if (!count.is_int()) return invalid_argument("replace() count must be an integer");
    return Value(py_replace(self, old_text, new_text, count.as_int()));
  }
  if (name == "upper") return Value(py_upper(self));
  if (name == "lower") return Value(py_lower(self));
  if (name == "capitalize") return Value(py_capitalize(self));
  if (name == "swapcase") {
    auto cps = utf8_decode(self);
    for (auto& cp : cps) cp = to_upper(cp) != cp ? to_upper(cp) : to_lower(cp);
    return Value(utf8_encode(cps));
  }
  if (name == "title") {
    auto cps = utf8_decode(self);
    bool previous_cased = false;
    for (auto& cp : cps) {
      bool cased = is_cased(cp);
      cp = cased ? (previous_cased ? to_lower(cp) : to_title(cp)) : cp;
      previous_cased = cased;
    }
    return Value(utf8_encode(cps));
  }
  if (name == "format") {
    KILN_ASSIGN_OR_RETURN(std::string out, py_format(self, args));
    return Value(std::move(out));
  }
  if (name == "join") {
    KILN_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(arg(args, 0, "iterable")));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return invalid_argument("sequence item " + std::to_string(i) + ": expected str instance, " +
                                items[i].type_name() + " found");
      }
      if (i > 0) out += self;
      out += items[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    KILN_ASSIGN_OR_RETURN(std::string sub, str_arg(args, 0, "sub", name));
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(py_len(self) + 1));
      int64_t n = 0;
      for (size_t pos = self.find(sub); pos != std::string::npos; pos = self.find(sub, pos + sub.size())) ++n;
      return Value(n);
    }
    size_t pos = name == "rfind" ? self.rfind(sub) : self.find(sub);
    if (pos == std::string::npos) {
      if (name == "index") return invalid_argument("substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(py_len(self.substr(0, pos))));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    KILN_ASSIGN_OR_RETURN(std::string fix, str_arg(args, 0, name == "removeprefix" ? "prefix" : "suffix", name));
    if (name == "removeprefix" && self.rfind(fix, 0) == 0) return Value(self.substr(fix.size()));
    if (name == "removesuffix" && self.size() >= fix.size() && !fix.empty() &&
        self.compare(self.size() - fix.size(), fix.size(), fix) == 0) {
      return Value(self.substr(0, self.size() - fix.size()));
    }
    return Value(self);
  }
  if (name == "splitlines") {
    std::vector<Value> lines;
    for (auto& l : py_splitlines(self)) lines.emplace_back(std::move(l));
    return Value::list(std::move(lines));
  }
  auto category_is = [](uint32_t cp, std::initializer_list<utf8proc_category_t> cats) {
    auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return std::find(cats.begin(), cats.end(), c) != cats.end();
  };
  if (name == "isdigit") return Value(all_code_points(self, [&](uint32_t cp) { return category_is(cp, {UTF8PROC_CATEGORY_ND}); }));
  if (name == "isspace") return Value(all_code_points(self, is_python_space));
  if (name == "isalpha" || name == "isalnum") {
    bool alnum = name == "isalnum";
    return Value(all_code_points(self, [&](uint32_t cp) {
      return category_is(cp, {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM,
                              UTF8PROC_CATEGORY_LO}) ||
             (alnum && category_is(cp, {UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO}));
    }));
  }
  if (name == "isupper" || name == "islower") {
    auto cps = utf8_decode(self);
    bool any_cased = false;
    for (uint32_t cp : cps) {
      if (!is_cased(cp)) continue;
      any_cased = true;
      if (name == "isupper" ? to_lower(cp) == cp && to_upper(cp) != cp : to_upper(cp) == cp && to_lower(cp) != cp) {
        return Value(false);
      }
    }
    return Value(any_cased);
  }
  return invalid_argument("'str' object has no attribute '" + name + "'");
}

}  // namespace kiln::llm::jinja
