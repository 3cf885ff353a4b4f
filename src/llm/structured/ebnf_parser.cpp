#include "llm/structured/ebnf_parser.h"

#include <cctype>
#include <map>
#include <optional>

#include "llm/structured/regex_parser.h"
#include "llm/structured/utf8_ranges.h"

namespace kiln::llm::structured {
namespace {

bool ebnf_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : s_(text) {}

  Expected<Grammar> parse() {
    skip_space();
    while (!error_ && !at_end()) {
      const size_t start = pos_;
      std::string name = identifier();
      if (name.empty()) {
        fail("expected a rule name");
        break;
      }
      skip_space();
      if (s_.substr(pos_, 3) != "::=") {
        fail("expected '::=' after the rule name '" + name + "'");
        break;
      }
      pos_ += 3;
      const int32_t rule = rule_id(name, start);
      if (builder_.defined(rule)) {
        pos_ = start;
        fail("the rule '" + name + "' is defined twice");
        break;
      }
      Expr body = alternatives();
      if (error_) break;
      builder_.define(rule, body);
      skip_space();
    }
    if (error_) return invalid_argument(*error_);
    const auto root = ids_.find("root");
    if (root == ids_.end()) return invalid_argument("grammar: there is no rule named 'root' (where the output starts)");
    for (const auto& [name, id] : ids_) {
      if (!builder_.defined(id)) {
        pos_ = first_use_[name];
        fail("the rule '" + name + "' is used but never defined");
        return invalid_argument(*error_);
      }
    }
    auto g = builder_.build(root->second);
    if (!g) return invalid_argument("grammar: " + g.status().message());
    return g;
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }

  void fail(const std::string& message) {
    if (error_) return;
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    error_ = "grammar at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message;
  }

  void skip_space() {
    while (!at_end()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        ++pos_;
      } else if (s_[pos_] == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string identifier() {
    const size_t start = pos_;
    if (at_end() || !(std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) return {};
    while (!at_end() && ebnf_name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  int32_t rule_id(const std::string& name, size_t at) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = builder_.declare(name);
    ids_[name] = id;
    first_use_[name] = at;
    return id;
  }

  // Whether a rule definition `name ::=` starts at pos_ (which ends the current rule).
  bool at_definition() const {
    size_t p = pos_;
    if (p >= s_.size() || !(std::isalpha(static_cast<unsigned char>(s_[p])) || s_[p] == '_')) return false;
    while (p < s_.size() && ebnf_name_char(s_[p])) ++p;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  Expr alternatives() {
    std::vector<Expr> alts;
    alts.push_back(sequence());
    while (!error_) {
      skip_space();
      if (at_end() || s_[pos_] != '|') break;
      ++pos_;
      alts.push_back(sequence());
    }
    return Expr::alt(std::move(alts));
  }

  Expr sequence() {
    std::vector<Expr> items;
    while (!error_) {
      skip_space();
      if (at_end() || s_[pos_] == '|' || s_[pos_] == ')' || at_definition()) break;
      Expr t = term();
      if (error_) break;
      items.push_back(quantifier(std::move(t)));
    }
    return Expr::seq(std::move(items));
  }

  Expr quantifier(Expr e) {
    for (int32_t stacked = 0; !at_end() && !error_; ++stacked) {
      if (stacked > kMaxGrammarNesting) {
        fail("too many quantifiers in a row");
        return e;
      }
      const char c = s_[pos_];
      if (c == '*') {
        ++pos_;
        e = Expr::repeat(std::move(e), 0, -1);
      } else if (c == '+') {
        ++pos_;
        e = Expr::repeat(std::move(e), 1, -1);
      } else if (c == '?') {
        ++pos_;
        e = Expr::optional(std::move(e));
      } else if (c == '{') {
        ++pos_;
        auto m = number();
        if (!m) {
          fail("a repetition {m,n} needs a number after '{'");
          return e;
        }
        int32_t max = *m;
        if (!at_end() && s_[pos_] == ',') {
          ++pos_;
          auto n = number();
          max = n ? *n : -1;
        }
        if (at_end() || s_[pos_] != '}') {
          fail("a repetition {m,n} must end with '}'");
          return e;
        }
        if ((max >= 0 && max < *m) || *m > kMaxRepeat || max > kMaxRepeat) {
          fail("a repetition {m,n} needs m <= n <= " + std::to_string(kMaxRepeat));
          return e;
        }
        ++pos_;
        e = Expr::repeat(std::move(e), *m, max);
      } else {
        break;
      }
    }
    return e;
  }

  std::optional<int32_t> number() {
    int64_t v = 0;
    size_t digits = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && digits < 9) {
      v = v * 10 + (s_[pos_++] - '0');
      ++digits;
    }
    if (!digits) return std::nullopt;
    return static_cast<int32_t>(v);
  }

  Expr term() {
    const char c = s_[pos_];
    if (c == '"') return literal();
    if (c == '[' || c == '.') {
      // A class or `.`, read by the regex parser.
      size_t end = pos_ + 1;
      if (c == '[') {
        if (end < s_.size() && s_[end] == '^') ++end;
        if (end < s_.size() && s_[end] == ']') ++end;  // a leading ']' is a member
        while (end < s_.size() && s_[end] != ']') end += s_[end] == '\\' ? 2 : 1;
        if (end >= s_.size()) {
          fail("missing ']'");
          return {};
        }
        ++end;
      }
      auto e = regex_to_expr(s_.substr(pos_, end - pos_), false);
      if (!e) {
        fail(e.status().message());
        return {};
      }
      pos_ = end;
      return std::move(*e);
    }
    if (c == '(') {
      ++pos_;
      if (++depth_ > kMaxGrammarNesting) {
        fail("groups nest deeper than " + std::to_string(kMaxGrammarNesting));
        return {};
      }
      Expr inner = alternatives();
      --depth_;
      if (error_) return {};
      skip_space();
      if (at_end() || s_[pos_] != ')') {
        fail("missing ')'");
        return {};
      }
      ++pos_;
      return inner;
    }
    const size_t start = pos_;
    std::string name = identifier();
    if (name.empty()) {
      fail(std::string("unexpected character '") + c + "'");
      return {};
    }
    return Expr::ref(rule_id(name, start));
  }

  Expr literal() {
    const size_t start = pos_;
    ++pos_;
    std::string bytes;
    while (true) {
      if (at_end() || s_[pos_] == '\n') {
        pos_ = start;
        fail("the string literal is not closed");
        return {};
      }
      const char c = s_[pos_++];
      if (c == '"') break;
      if (c != '\\') {
        bytes += c;
        continue;
      }
      if (at_end()) continue;
      const char e = s_[pos_++];
      auto hex = [&](size_t digits) { return read_hex_digits(s_, pos_, digits); };
      switch (e) {
        case 'n': bytes += '\n'; break;
        case 't': bytes += '\t'; break;
        case 'r': bytes += '\r'; break;
        case '\\': bytes += '\\'; break;
        case '"': bytes += '"'; break;
        case 'x': {
          auto v = hex(2);
          if (!v) {
            fail("\\x needs two hex digits");
            return {};
          }
          bytes += static_cast<char>(*v);
          break;
        }
        case 'u': {
          auto v = hex(4);
          if (!v || (*v >= 0xD800 && *v <= 0xDFFF)) {
            fail("\\u needs four hex digits of a character (not a surrogate)");
            return {};
          }
          for (const auto& seq : utf8_sequences(*v, *v)) {
            for (const auto& [lo, hi] : seq) bytes += static_cast<char>(lo);
          }
          break;
        }
        default:
          --pos_;
          fail(std::string("unknown escape \\") + e + " in a string literal");
          return {};
      }
    }
    return Expr::literal(bytes);
  }

  std::string_view s_;
  size_t pos_ = 0;
  int32_t depth_ = 0;
  GrammarBuilder builder_;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, size_t> first_use_;
  std::optional<std::string> error_;
};

}  // namespace

Expected<Grammar> parse_ebnf(std::string_view text) { return EbnfParser(text).parse(); }

}  // namespace kiln::llm::structured
