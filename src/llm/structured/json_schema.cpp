#include "llm/structured/json_schema.h"

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "llm/structured/regex_parser.h"
#include "llm/structured/utf8_ranges.h"

namespace kiln::llm::structured {
namespace {

using Json = nlohmann::ordered_json;

// Numeric bounds beyond +-kMaxBound are tightened to it (the grammar then writes a subset of
// what the schema allows: zod's int() bounds every integer by +-(2^53 - 1)), or refused when
// they exclude every number up to it.
constexpr double kMaxBound = 1e15;
constexpr int32_t kMaxDigits = 16;

Expr schema_digit() { return Expr::bytes('0', '9'); }
Expr schema_digits(int32_t n) { return Expr::repeat(schema_digit(), n, n); }

// [a, b] for decimal strings of equal length, a <= b.
Expr schema_same_length_range(const std::string& a, const std::string& b) {
  if (a.empty()) return Expr::empty();
  if (a == b) return Expr::literal(a);
  const auto d0 = static_cast<uint8_t>(a[0]), e0 = static_cast<uint8_t>(b[0]);
  const std::string ra = a.substr(1), rb = b.substr(1);
  const auto n = static_cast<int32_t>(ra.size());
  if (d0 == e0) return Expr::seq({Expr::byte(d0), schema_same_length_range(ra, rb)});
  if (ra == std::string(ra.size(), '0') && rb == std::string(rb.size(), '9')) {
    return Expr::seq({Expr::bytes(d0, e0), schema_digits(n)});
  }
  std::vector<Expr> alts;
  alts.push_back(Expr::seq({Expr::byte(d0), schema_same_length_range(ra, std::string(ra.size(), '9'))}));
  if (e0 - d0 >= 2) alts.push_back(Expr::seq({Expr::bytes(static_cast<uint8_t>(d0 + 1), static_cast<uint8_t>(e0 - 1)), schema_digits(n)}));
  alts.push_back(Expr::seq({Expr::byte(e0), schema_same_length_range(std::string(rb.size(), '0'), rb)}));
  return Expr::alt(std::move(alts));
}

// Non-negative integers in [lo, hi] without leading zeros; no hi = up to kMaxDigits digits.
Expr schema_uint_range(int64_t lo, std::optional<int64_t> hi) {
  std::vector<Expr> alts;
  const auto lo_s = std::to_string(lo);
  const int32_t last = hi ? static_cast<int32_t>(std::to_string(*hi).size()) : kMaxDigits;
  for (int32_t d = static_cast<int32_t>(lo_s.size()); d <= last; ++d) {
    const std::string first = d == 1 ? "0" : "1" + std::string(static_cast<size_t>(d - 1), '0');
    const std::string top(static_cast<size_t>(d), '9');
    const std::string a = d == static_cast<int32_t>(lo_s.size()) ? lo_s : first;
    std::string b = top;
    if (hi && d == last) b = std::to_string(*hi);
    if (a.size() == b.size() && a <= b) alts.push_back(schema_same_length_range(a, b));
  }
  return Expr::alt(std::move(alts));
}

// Integers in [lo, hi] (either side open when absent), as JSON writes them.
Expr schema_int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Expr> alts;
  if (!hi || *hi >= 0) alts.push_back(schema_uint_range(lo ? std::max<int64_t>(*lo, 0) : 0, hi));
  if (!lo || *lo < 0) {
    const int64_t nlo = hi && *hi < 0 ? -*hi : 1;
    std::optional<int64_t> nhi;
    if (lo) nhi = -*lo;
    alts.push_back(Expr::seq({Expr::byte('-'), schema_uint_range(nlo, nhi)}));
  }
  return Expr::alt(std::move(alts));
}

const std::set<std::string>& schema_annotations() {
  static const std::set<std::string> k = {"description", "title",    "default",  "examples", "$schema",
                                           "$id",         "$comment", "deprecated", "readOnly", "writeOnly"};
  return k;
}

const std::set<std::string>& schema_keywords() {
  static const std::set<std::string> k = {
      "type",      "properties", "required",  "additionalProperties", "items",     "minItems",  "maxItems",
      "enum",      "const",      "anyOf",     "allOf",   "$ref",      "$defs",     "definitions", "pattern",
      "minLength", "maxLength",  "format",    "minimum", "maximum",   "exclusiveMinimum", "exclusiveMaximum",
      "uniqueItems"};
  return k;
}

// The formats as regexes of regex_parser.h, each a subset of what ajv-formats' full mode accepts.
std::optional<std::string> schema_format_regex(const std::string& f) {
  const std::string leap = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
  const std::string date = "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
                           "|02-(?:0[1-9]|1[0-9]|2[0-8]))|" + leap + "-02-29)";
  const std::string time = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
  if (f == "date") return date;
  if (f == "time") return time;
  if (f == "date-time") return date + "T" + time;
  if (f == "email") {
    return "[a-zA-Z0-9_+-]{1,32}(?:\\.[a-zA-Z0-9_+-]{1,32}){0,3}@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?"
           "(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?){0,3}\\.[a-zA-Z]{2,8}";
  }
  if (f == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  if (f == "ipv4") return "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  return std::nullopt;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, std::string path) : root_(root), root_path_(std::move(path)) {}

  Expected<Grammar> compile() {
    Expr top = schema(root_, root_path_);
    while (!error_ && !pending_.empty()) {
      auto [rule, target, path] = pending_.back();
      pending_.pop_back();
      b_.define(rule, schema(*target, path));
    }
    if (error_) return invalid_argument(*error_);
    const int32_t root = b_.add("root", top);
    auto g = b_.build(root);
    if (!g) return invalid_argument(root_path_ + ": " + g.status().message());
    return g;
  }

  // Any JSON object, for json_object.
  Grammar any_object() {
    const int32_t root = b_.add("root", Expr::ref(any_object_rule()));
    auto g = b_.build(root);
    KILN_CHECK(g.has_value());
    return std::move(*g);
  }

 private:
  void fail(const std::string& path, const std::string& message) {
    if (!error_) error_ = path + ": " + message;
  }

  int32_t shared(const std::string& name, const std::function<Expr()>& make) {
    auto it = shared_.find(name);
    if (it != shared_.end()) return it->second;
    const int32_t r = b_.declare(name);
    shared_[name] = r;
    b_.define(r, make());
    return r;
  }

  Expr ws() {
    return Expr::ref(shared("ws", [] {
      return Expr::optional(Expr::alt({Expr::byte(' '), Expr::seq({Expr::byte('\n'), Expr::repeat(Expr::byte(' '), 0, 20)})}));
    }));
  }
  // ':' then nothing or one space; ',' then ws(): compact and pretty-printed JSON, nothing else.
  Expr sep(char c) {
    if (c == ':') return Expr::seq({Expr::byte(':'), Expr::optional(Expr::byte(' '))});
    return Expr::seq({Expr::byte(static_cast<uint8_t>(c)), ws()});
  }

  Expr string_char() {
    return Expr::ref(shared("char", [] { return codepoint_set_expr({{0, kMaxCodepoint}}, true); }));
  }
  Expr any_string() {
    return Expr::ref(shared("string", [&] {
      return Expr::seq({Expr::byte('"'), Expr::repeat(string_char(), 0, -1), Expr::byte('"')});
    }));
  }
  Expr any_integer() { return Expr::ref(shared("integer", [] { return schema_int_range(std::nullopt, std::nullopt); })); }
  Expr any_number() {
    return Expr::ref(shared("number", [&] {
      return Expr::seq({Expr::optional(Expr::byte('-')), schema_uint_range(0, std::nullopt),
                        Expr::optional(Expr::seq({Expr::byte('.'), Expr::repeat(schema_digit(), 1, kMaxDigits)})),
                        Expr::optional(Expr::seq({Expr::alt({Expr::byte('e'), Expr::byte('E')}), Expr::optional(Expr::alt({Expr::byte('+'), Expr::byte('-')})),
                                                  Expr::repeat(schema_digit(), 1, 2)}))});
    }));
  }
  int32_t any_value_rule() {
    auto it = shared_.find("value");
    if (it != shared_.end()) return it->second;
    const int32_t value = b_.declare("value");
    shared_["value"] = value;
    const int32_t array = b_.declare("array");
    b_.define(array, Expr::seq({Expr::byte('['), ws(),
                                Expr::optional(Expr::seq({Expr::ref(value), Expr::repeat(Expr::seq({sep(','), Expr::ref(value)}), 0, -1)})),
                                ws(), Expr::byte(']')}));
    b_.define(value, Expr::alt({Expr::ref(any_object_rule()), Expr::ref(array), any_string(), any_number(),
                                Expr::literal("true"), Expr::literal("false"), Expr::literal("null")}));
    return value;
  }
  int32_t any_object_rule() {
    auto it = shared_.find("object");
    if (it != shared_.end()) return it->second;
    const int32_t object = b_.declare("object");
    shared_["object"] = object;
    const int32_t value = any_value_rule();
    const Expr pair = Expr::seq({any_string(), sep(':'), Expr::ref(value)});
    b_.define(object, Expr::seq({Expr::byte('{'), ws(),
                                 Expr::optional(Expr::seq({pair, Expr::repeat(Expr::seq({sep(','), pair}), 0, -1)})), ws(),
                                 Expr::byte('}')}));
    return object;
  }

  // A JSON string key that differs from every name in `names`: printable ASCII without '"' and
  // '\' (names with other characters cannot collide with it).
  Expr key_other_than(const std::vector<std::string>& names) {
    std::vector<std::string> ascii;
    for (const std::string& n : names) {
      bool plain = true;
      for (char c : n) plain = plain && c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
      if (plain) ascii.push_back(n);
    }
    const auto key_char_set = [](const std::set<uint8_t>& except) {
      std::vector<Expr> alts;
      int lo = -1;
      for (int c = 0x20; c <= 0x7f; ++c) {
        const bool ok = c < 0x7f && c != '"' && c != '\\' && !except.contains(static_cast<uint8_t>(c));
        if (ok && lo < 0) lo = c;
        if (!ok && lo >= 0) {
          alts.push_back(Expr::bytes(static_cast<uint8_t>(lo), static_cast<uint8_t>(c - 1)));
          lo = -1;
        }
      }
      return Expr::alt(std::move(alts));
    };
    const Expr any_tail = Expr::repeat(key_char_set({}), 0, -1);
    // Over the trie of names: at each prefix, end here (unless a name ends here), go on with a
    // byte that continues some name, or leave every name with another byte.
    std::function<Expr(const std::string&)> node = [&](const std::string& prefix) {
      std::set<uint8_t> next;
      bool is_name = false;
      for (const std::string& n : ascii) {
        if (n.size() > prefix.size() && n.compare(0, prefix.size(), prefix) == 0) next.insert(static_cast<uint8_t>(n[prefix.size()]));
        if (n == prefix) is_name = true;
      }
      std::vector<Expr> alts;
      if (!is_name) alts.push_back(Expr::empty());
      for (uint8_t c : next) alts.push_back(Expr::seq({Expr::byte(c), node(prefix + static_cast<char>(c))}));
      alts.push_back(Expr::seq({key_char_set(next), any_tail}));
      return Expr::alt(std::move(alts));
    };
    return Expr::seq({Expr::byte('"'), node(""), Expr::byte('"')});
  }

  std::optional<double> number_of(const Json& s, const char* key, const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number()) {
      fail(path + "." + key, std::string(key) + " must be a number");
      return std::nullopt;
    }
    return it->get<double>();
  }

  std::optional<int64_t> count_of(const Json& s, const char* key, const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      fail(path + "." + key, std::string(key) + " must be a non-negative integer");
      return std::nullopt;
    }
    if (it->get<int64_t>() > kMaxRepeat) {
      fail(path + "." + key, std::string(key) + " above " + std::to_string(kMaxRepeat) + " is not supported");
      return std::nullopt;
    }
    return it->get<int64_t>();
  }

  Expr schema(const Json& s, const std::string& path) {
    if (error_) return {};
    struct Depth {
      int32_t& d;
      explicit Depth(int32_t& x) : d(++x) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxGrammarNesting) {
      fail(path, "schemas nest deeper than " + std::to_string(kMaxGrammarNesting));
      return {};
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return Expr::ref(any_value_rule());
      fail(path, "the schema false matches nothing");
      return {};
    }
    if (!s.is_object()) {
      fail(path, "a schema must be an object or a boolean");
      return {};
    }
    for (const auto& [key, value] : s.items()) {
      if (schema_annotations().contains(key) || schema_keywords().contains(key)) continue;
      if (key == "oneOf") {
        fail(path + ".oneOf", "the keyword 'oneOf' is not supported: a grammar cannot ensure that exactly one "
                              "alternative matches; use anyOf");
      } else {
        fail(path + "." + key, "the keyword '" + key + "' is not supported (see docs/structured-outputs.md for the "
                               "supported subset)");
      }
      return {};
    }
    if (auto u = s.find("uniqueItems"); u != s.end() && !(u->is_boolean() && !u->get<bool>())) {
      fail(path + ".uniqueItems", "the keyword 'uniqueItems' is supported only as false");
      return {};
    }
    const auto has = [&](const char* key) { return s.contains(key); };
    // Keywords that decide the whole value; the others must not be beside them.
    for (const char* whole : {"$ref", "const", "enum", "anyOf", "allOf"}) {
      if (!has(whole)) continue;
      for (const auto& [key, value] : s.items()) {
        if (key == whole || schema_annotations().contains(key) || key == "$defs" || key == "definitions") continue;
        if ((std::string(whole) == "const" || std::string(whole) == "enum") && key == "type") continue;
        fail(path + "." + key, "the keyword '" + key + "' beside '" + whole + "' is not supported");
        return {};
      }
    }
    if (has("$ref")) return reference(s["$ref"], path + ".$ref");
    if (has("const")) return Expr::literal(s["const"].dump());
    if (has("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) {
        fail(path + ".enum", "enum must be a non-empty list");
        return {};
      }
      std::vector<std::string> literals;
      for (const Json& v : e) literals.push_back(v.dump());
      return Expr::literal_set(std::move(literals));
    }
    for (const char* list : {"anyOf", "allOf"}) {
      if (!has(list)) continue;
      const Json& l = s[list];
      if (!l.is_array() || l.empty()) {
        fail(path + "." + list, std::string(list) + " must be a non-empty list of schemas");
        return {};
      }
      if (std::string(list) == "allOf" && l.size() != 1) {
        fail(path + ".allOf", "allOf is supported with one schema only");
        return {};
      }
      std::vector<Expr> alts;
      for (size_t i = 0; i < l.size(); ++i) alts.push_back(schema(l[i], path + "." + list + "[" + std::to_string(i) + "]"));
      return Expr::alt(std::move(alts));
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const Json& x : *t) {
          if (!x.is_string()) {
            fail(path + ".type", "type must be a string or a list of strings");
            return {};
          }
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(path + ".type", "type must be a string or a non-empty list of strings");
        return {};
      }
    } else if (has("properties") || has("required") || has("additionalProperties")) {
      types.push_back("object");
    } else if (has("items") || has("minItems") || has("maxItems")) {
      types.push_back("array");
    } else if (has("pattern") || has("format") || has("minLength") || has("maxLength")) {
      types.push_back("string");
    } else if (has("minimum") || has("maximum") || has("exclusiveMinimum") || has("exclusiveMaximum")) {
      types.push_back("number");
    } else {
      return Expr::ref(any_value_rule());
    }
    std::vector<Expr> alts;
    for (const std::string& t : types) {
      if (t == "object") {
        alts.push_back(object(s, path));
      } else if (t == "array") {
        alts.push_back(array(s, path));
      } else if (t == "string") {
        alts.push_back(string(s, path));
      } else if (t == "integer" || t == "number") {
        alts.push_back(number(s, path, t == "integer"));
      } else if (t == "boolean") {
        alts.push_back(Expr::alt({Expr::literal("true"), Expr::literal("false")}));
      } else if (t == "null") {
        alts.push_back(Expr::literal("null"));
      } else {
        fail(path + ".type", "unknown type '" + t + "' (object, array, string, integer, number, boolean, null)");
        return {};
      }
    }
    return Expr::alt(std::move(alts));
  }

  Expr reference(const Json& ref, const std::string& path) {
    if (!ref.is_string()) {
      fail(path, "$ref must be a string");
      return {};
    }
    const std::string r = ref.get<std::string>();
    auto it = refs_.find(r);
    if (it != refs_.end()) return Expr::ref(it->second);
    if (r.empty() || r[0] != '#') {
      fail(path, "$ref '" + r + "' is not supported: only references inside the schema (#/$defs/...) are");
      return {};
    }
    const Json* target = &root_;
    if (r.size() > 1) {
      try {
        target = &root_.at(Json::json_pointer(r.substr(1)));
      } catch (const std::exception&) {
        fail(path, "$ref '" + r + "' points at nothing in the schema");
        return {};
      }
    }
    const int32_t rule = b_.declare("ref");
    refs_[r] = rule;
    pending_.push_back({rule, target, root_path_ + r.substr(1)});
    return Expr::ref(rule);
  }

  Expr object(const Json& s, const std::string& path) {
    static const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) {
      fail(path + ".properties", "properties must be an object");
      return {};
    }
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) {
        fail(path + ".required", "required must be a list of property names");
        return {};
      }
      for (const Json& name : *r) {
        if (!name.is_string() || !props.contains(name.get<std::string>())) {
          fail(path + ".required", "required names " + name.dump() + ", which is not in properties");
          return {};
        }
        required.insert(name.get<std::string>());
      }
    }
    std::optional<Expr> extra_value;
    if (auto a = s.find("additionalProperties"); a == s.end() || (a->is_boolean() && a->get<bool>())) {
      extra_value = Expr::ref(any_value_rule());
    } else if (a->is_object()) {
      extra_value = Expr::ref(b_.add("extra", schema(*a, path + ".additionalProperties")));
    } else if (!a->is_boolean()) {
      fail(path + ".additionalProperties", "additionalProperties must be a boolean or a schema");
      return {};
    }
    std::vector<Expr> pairs;
    std::vector<bool> needed;
    std::vector<std::string> names;
    for (const auto& [name, sub] : props.items()) {
      names.push_back(name);
      Expr value = schema(sub, path + ".properties." + name);
      pairs.push_back(Expr::seq({Expr::literal(Json(name).dump()), sep(':'), std::move(value)}));
      needed.push_back(required.contains(name));
    }
    if (error_) return {};
    const size_t k = pairs.size();
    // rest[i]: after at least one pair, the properties from i on; first[i]: before any pair.
    std::vector<int32_t> rest(k + 1), first(k + 1);
    std::optional<Expr> extra_pair;
    if (extra_value) extra_pair = Expr::seq({key_other_than(names), sep(':'), *extra_value});
    rest[k] = b_.add("rest", extra_pair ? Expr::repeat(Expr::seq({sep(','), *extra_pair}), 0, -1) : Expr::empty());
    first[k] = b_.add("first", extra_pair ? Expr::optional(Expr::seq({*extra_pair, Expr::ref(rest[k])})) : Expr::empty());
    for (size_t i = k; i-- > 0;) {
      const Expr with = Expr::seq({sep(','), pairs[i], Expr::ref(rest[i + 1])});
      rest[i] = b_.add("rest", needed[i] ? with : Expr::alt({with, Expr::ref(rest[i + 1])}));
      const Expr start = Expr::seq({pairs[i], Expr::ref(rest[i + 1])});
      first[i] = b_.add("first", needed[i] ? start : Expr::alt({start, Expr::ref(first[i + 1])}));
    }
    return Expr::seq({Expr::byte('{'), ws(), Expr::ref(first[0]), ws(), Expr::byte('}')});
  }

  Expr array(const Json& s, const std::string& path) {
    Expr item = Expr::ref(any_value_rule());
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {
        fail(path + ".items", "items as a list (tuples) is not supported");
        return {};
      }
      item = Expr::ref(b_.add("item", schema(*it, path + ".items")));
    }
    const int64_t min = count_of(s, "minItems", path).value_or(0);
    const std::optional<int64_t> max = count_of(s, "maxItems", path);
    if (error_) return {};
    if (max && *max < min) {
      fail(path + ".maxItems", "maxItems is below minItems");
      return {};
    }
    const auto open = Expr::seq({Expr::byte('['), ws()});
    const auto close = Expr::seq({ws(), Expr::byte(']')});
    if (max && *max == 0) return Expr::seq({open, close});
    const auto more_max = max ? static_cast<int32_t>(*max - 1) : -1;
    const Expr items = Expr::seq({item, Expr::repeat(Expr::seq({sep(','), item}), static_cast<int32_t>(std::max<int64_t>(min - 1, 0)), more_max)});
    return Expr::seq({open, min == 0 ? Expr::optional(items) : items, close});
  }

  Expr string(const Json& s, const std::string& path) {
    const auto min = count_of(s, "minLength", path);
    const auto max = count_of(s, "maxLength", path);
    if (error_) return {};
    const bool lengths = min || max;
    if (auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) {
        fail(path + ".format", "format must be a string");
        return {};
      }
      auto re = schema_format_regex(f->get<std::string>());
      if (!re) {
        fail(path + ".format", "the format '" + f->get<std::string>() +
                                   "' is not supported (supported: date, time, date-time, email, uuid, ipv4)");
        return {};
      }
      if (lengths || s.contains("pattern")) {
        fail(path + ".format", "format together with pattern, minLength or maxLength is not supported");
        return {};
      }
      auto e = regex_to_expr(*re, true);
      KILN_CHECK(e.has_value());
      return Expr::seq({Expr::byte('"'), std::move(*e), Expr::byte('"')});
    }
    if (auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) {
        fail(path + ".pattern", "pattern must be a string");
        return {};
      }
      if (lengths) {
        fail(path + ".pattern", "pattern together with minLength or maxLength is not supported");
        return {};
      }
      auto e = regex_to_expr(p->get<std::string>(), true);
      if (!e) {
        fail(path + ".pattern", e.status().message());
        return {};
      }
      return Expr::seq({Expr::byte('"'), std::move(*e), Expr::byte('"')});
    }
    if (!lengths) return any_string();
    if (max && min && *max < *min) {
      fail(path + ".maxLength", "maxLength is below minLength");
      return {};
    }
    return Expr::seq({Expr::byte('"'),
                      Expr::repeat(string_char(), static_cast<int32_t>(min.value_or(0)), max ? static_cast<int32_t>(*max) : -1),
                      Expr::byte('"')});
  }

  Expr number(const Json& s, const std::string& path, bool integer) {
    const auto min = number_of(s, "minimum", path), max = number_of(s, "maximum", path);
    const auto xmin = number_of(s, "exclusiveMinimum", path), xmax = number_of(s, "exclusiveMaximum", path);
    if (error_) return {};
    if (!min && !max && !xmin && !xmax) return integer ? any_integer() : any_number();
    // The smallest and largest integers allowed, and the bounds fractions must keep inside.
    std::optional<double> lo_i, hi_i;
    if (min) lo_i = std::ceil(*min);
    if (xmin) lo_i = std::max(lo_i.value_or(-INFINITY), std::floor(*xmin) + 1);
    if (max) hi_i = std::floor(*max);
    if (xmax) hi_i = std::min(hi_i.value_or(INFINITY), std::ceil(*xmax) - 1);
    if ((lo_i && *lo_i > kMaxBound) || (hi_i && *hi_i < -kMaxBound)) {
      fail(path, "numeric bounds that exclude every number within +-1e15 are not supported");
      return {};
    }
    if (lo_i) lo_i = std::max(*lo_i, -kMaxBound);
    if (hi_i) hi_i = std::min(*hi_i, kMaxBound);
    if (lo_i && hi_i && *lo_i > *hi_i) {
      fail(path, "no integer lies within minimum/maximum");
      return {};
    }
    std::optional<int64_t> lo, hi;
    if (lo_i) lo = static_cast<int64_t>(*lo_i);
    if (hi_i) hi = static_cast<int64_t>(*hi_i);
    std::vector<Expr> alts;
    alts.push_back(schema_int_range(lo, hi));
    if (!integer) {
      // Fractions: floor(x) >= ceil(lower bound) and ceil(x) <= floor(upper bound), whether the
      // bounds are exclusive or not (a fraction never equals an integer bound).
      lo.reset();
      hi.reset();
      if (min || xmin) {
        lo = static_cast<int64_t>(std::max(std::ceil(std::max(min.value_or(-INFINITY), xmin.value_or(-INFINITY))), -kMaxBound));
      }
      if (max || xmax) {
        hi = static_cast<int64_t>(std::min(std::floor(std::min(max.value_or(INFINITY), xmax.value_or(INFINITY))), kMaxBound));
      }
      // Fractions x with lo <= floor(x) and ceil(x) <= hi lie strictly between two allowed
      // integers, so inside every bound, exclusive or not.
      const Expr frac = Expr::seq({Expr::byte('.'), Expr::repeat(schema_digit(), 0, kMaxDigits - 2), Expr::bytes('1', '9')});
      // Non-negative: integer part I in [max(lo, 0), hi - 1].
      const int64_t p_lo = std::max<int64_t>(lo.value_or(0), 0);
      std::optional<int64_t> p_hi;
      if (hi) p_hi = *hi - 1;
      if (!p_hi || *p_hi >= p_lo) alts.push_back(Expr::seq({schema_uint_range(p_lo, p_hi), frac}));
      // Negative: -(I.F) with I in [max(-hi, 0), -lo - 1].
      const int64_t n_lo = std::max<int64_t>(hi ? -*hi : 0, 0);
      std::optional<int64_t> n_hi;
      if (lo) n_hi = -*lo - 1;
      if (!n_hi || *n_hi >= n_lo) alts.push_back(Expr::seq({Expr::byte('-'), schema_uint_range(n_lo, n_hi), frac}));
    }
    return Expr::alt(std::move(alts));
  }

  const Json& root_;
  std::string root_path_;
  GrammarBuilder b_;
  std::map<std::string, int32_t> shared_;
  std::map<std::string, int32_t> refs_;
  struct Pending {
    int32_t rule;
    const Json* target;
    std::string path;
  };
  std::vector<Pending> pending_;
  std::optional<std::string> error_;
  int32_t depth_ = 0;
};

}  // namespace

Expected<Grammar> json_schema_grammar(std::string_view schema_json, const std::string& path) {
  Json schema = Json::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return invalid_argument(path + ": the schema is not valid JSON");
  return SchemaCompiler(schema, path).compile();
}

Grammar json_object_grammar() {
  static const Json empty = Json::object();
  return SchemaCompiler(empty, "").any_object();
}

}  // namespace kiln::llm::structured
