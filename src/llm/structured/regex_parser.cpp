#include "llm/structured/regex_parser.h"

#include <cctype>
#include <optional>

#include "llm/structured/utf8_ranges.h"

namespace kiln::llm::structured {
namespace {

class RegexParser {
 public:
  RegexParser(std::string_view text, bool json_string) : s_(text), json_(json_string) {}

  Expected<Expr> parse() {
    if (!s_.empty() && s_[0] == '^') ++pos_;
    Expr e = alternation();
    if (!error_ && pos_ < s_.size()) fail(s_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    if (error_) return invalid_argument(*error_);
    return e;
  }

 private:
  void fail(const std::string& message) {
    if (!error_) error_ = "regex at offset " + std::to_string(pos_) + ": " + message;
  }
  bool at_end() const { return pos_ >= s_.size(); }
  // '$' as the very last character (outside a group) ends the pattern.
  bool at_final_dollar() const { return pos_ + 1 == s_.size() && s_[pos_] == '$' && depth_ == 0; }

  Expr alternation() {
    std::vector<Expr> alternatives;
    alternatives.push_back(sequence());
    while (!error_ && !at_end() && s_[pos_] == '|') {
      ++pos_;
      alternatives.push_back(sequence());
    }
    return Expr::alt(std::move(alternatives));
  }

  Expr sequence() {
    std::vector<Expr> items;
    while (!error_ && !at_end() && s_[pos_] != '|' && s_[pos_] != ')') {
      if (at_final_dollar()) {
        ++pos_;
        break;
      }
      Expr atom_expr = atom();
      if (error_) break;
      items.push_back(quantified(std::move(atom_expr)));
    }
    return Expr::seq(std::move(items));
  }

  Expr quantified(Expr e) {
    for (int32_t stacked = 0; !error_ && !at_end(); ++stacked) {
      if (stacked > kMaxGrammarNesting) {
        fail("too many quantifiers in a row");
        return e;
      }
      const char c = s_[pos_];
      int32_t min = 0, max = -1;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{') {
        const size_t start = pos_;
        ++pos_;
        auto m = number();
        if (!m) {
          pos_ = start;
          fail("'{' must start a repetition {m}, {m,} or {m,n}");
          return e;
        }
        min = *m;
        max = *m;
        if (!at_end() && s_[pos_] == ',') {
          ++pos_;
          auto n = number();
          max = n ? *n : -1;
        }
        if (at_end() || s_[pos_] != '}') {
          fail("a repetition {m,n} must end with '}'");
          return e;
        }
        ++pos_;
        if (max >= 0 && max < min) {
          fail("a repetition {m,n} needs m <= n");
          return e;
        }
        if (min > kMaxRepeat || max > kMaxRepeat) {
          fail("a repetition bound above " + std::to_string(kMaxRepeat) + " is not supported");
          return e;
        }
      } else {
        break;
      }
      if (!at_end() && s_[pos_] == '?') ++pos_;  // lazy: the same language
      if (!at_end() && s_[pos_] == '+') {
        fail("possessive quantifiers are not supported");
        return e;
      }
      e = Expr::repeat(std::move(e), min, max);
    }
    return e;
  }

  std::optional<int32_t> number() {
    int64_t v = 0;
    size_t digits = 0;
    while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9' && digits < 9) {
      v = v * 10 + (s_[pos_] - '0');
      ++pos_;
      ++digits;
    }
    if (digits == 0) return std::nullopt;
    return static_cast<int32_t>(v);
  }

  // One UTF-8 character of the pattern as a code point (invalid bytes stand for themselves).
  uint32_t next_codepoint() {
    const auto b = static_cast<uint8_t>(s_[pos_]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    if (pos_ + static_cast<size_t>(n) > s_.size()) {
      ++pos_;
      return b;
    }
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s_[pos_ + static_cast<size_t>(i)]) & 0x3F);
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  Expr atom() {
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (!at_end() && s_[pos_] == '?') {
        if (s_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (s_.substr(pos_, 2) == "?<" && s_.substr(pos_, 3) != "?<=" && s_.substr(pos_, 3) != "?<!") {
          const size_t close = s_.find('>', pos_);
          if (close == std::string_view::npos) {
            fail("a named group (?<name>...) needs '>'");
            return {};
          }
          pos_ = close + 1;
        } else {
          fail("lookaround and inline flags are not supported");
          return {};
        }
      }
      if (++depth_ > kMaxGrammarNesting) {
        fail("groups nest deeper than " + std::to_string(kMaxGrammarNesting));
        return {};
      }
      Expr inner = alternation();
      --depth_;
      if (error_) return {};
      if (at_end() || s_[pos_] != ')') {
        fail("missing ')'");
        return {};
      }
      ++pos_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return codepoint_set_expr(codepoint_set_complement({{'\n', '\n'}}), json_);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      fail(std::string("'") + c + "' has nothing to repeat");
      return {};
    }
    if (c == '^' || c == '$') {
      fail(std::string("the anchor '") + c + "' is supported only at the start (^) or end ($) of the pattern");
      return {};
    }
    if (c == '\\') {
      CodepointSet set;
      if (!escape(set, /*in_class=*/false)) return {};
      return codepoint_set_expr(set, json_);
    }
    const uint32_t cp = next_codepoint();
    return codepoint_set_expr({{cp, cp}}, json_);
  }

  // Reads an escape at pos_ ('\\') into `set`.
  bool escape(CodepointSet& set, bool in_class) {
    ++pos_;
    if (at_end()) {
      fail("the pattern ends with a lone backslash");
      return false;
    }
    const char c = s_[pos_++];
    const CodepointSet digit = {{'0', '9'}};
    const CodepointSet word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const CodepointSet space = {{'\t', '\r'}, {' ', ' '}};
    auto add = [&](const CodepointSet& s) { set.insert(set.end(), s.begin(), s.end()); };
    auto hex = [&](size_t digits) { return read_hex_digits(s_, pos_, digits); };
    switch (c) {
      case 'd': add(digit); return true;
      case 'D': add(codepoint_set_complement(digit)); return true;
      case 'w': add(word); return true;
      case 'W': add(codepoint_set_complement(word)); return true;
      case 's': add(space); return true;
      case 'S': add(codepoint_set_complement(space)); return true;
      case 'n': set.push_back({'\n', '\n'}); return true;
      case 't': set.push_back({'\t', '\t'}); return true;
      case 'r': set.push_back({'\r', '\r'}); return true;
      case 'f': set.push_back({'\f', '\f'}); return true;
      case 'v': set.push_back({'\v', '\v'}); return true;
      case '0': set.push_back({0, 0}); return true;
      case 'x': {
        auto v = hex(2);
        if (!v) {
          fail("\\x needs two hex digits");
          return false;
        }
        set.push_back({*v, *v});
        return true;
      }
      case 'u': {
        std::optional<uint32_t> v;
        if (!at_end() && s_[pos_] == '{') {
          ++pos_;
          const size_t close = s_.find('}', pos_);
          if (close != std::string_view::npos && close > pos_ && close - pos_ <= 6) v = hex(close - pos_);
          if (v) ++pos_;
        } else {
          v = hex(4);
        }
        if (!v || *v > kMaxCodepoint) {
          fail("\\u needs four hex digits or {hex} of a code point");
          return false;
        }
        set.push_back({*v, *v});
        return true;
      }
      case 'b':
        if (in_class) {
          set.push_back({'\b', '\b'});
          return true;
        }
        fail("word boundaries (\\b) are not supported");
        return false;
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) {
          --pos_;
          fail(std::string("the escape \\") + c + " is not supported");
          return false;
        }
        --pos_;
        const uint32_t cp = next_codepoint();
        set.push_back({cp, cp});
        return true;
    }
  }

  Expr char_class() {
    const size_t start = pos_;
    ++pos_;
    bool negate = false;
    if (!at_end() && s_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    CodepointSet set;
    bool first = true;
    while (true) {
      if (at_end()) {
        pos_ = start;
        fail("missing ']'");
        return {};
      }
      if (s_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      CodepointSet item;
      if (s_[pos_] == '\\') {
        if (!escape(item, /*in_class=*/true)) return {};
      } else if (s_[pos_] == '[' && s_.substr(pos_, 2) == "[:") {
        fail("POSIX classes [:name:] are not supported");
        return {};
      } else {
        const uint32_t cp = next_codepoint();
        item.push_back({cp, cp});
      }
      // A range a-b when both ends are single characters.
      if (item.size() == 1 && item[0].lo == item[0].hi && pos_ + 1 < s_.size() && s_[pos_] == '-' &&
          s_[pos_ + 1] != ']') {
        ++pos_;
        CodepointSet end;
        if (s_[pos_] == '\\') {
          if (!escape(end, /*in_class=*/true)) return {};
        } else {
          const uint32_t cp = next_codepoint();
          end.push_back({cp, cp});
        }
        if (end.size() != 1 || end[0].lo != end[0].hi || end[0].lo < item[0].lo) {
          fail("a class range a-b needs single characters with a <= b");
          return {};
        }
        item[0].hi = end[0].lo;
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    if (negate) set = codepoint_set_complement(set);
    return codepoint_set_expr(set, json_);
  }

  std::string_view s_;
  bool json_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::optional<std::string> error_;
};

}  // namespace

Expected<Expr> regex_to_expr(std::string_view pattern, bool json_string) {
  return RegexParser(pattern, json_string).parse();
}

Expected<Grammar> regex_grammar(std::string_view pattern) {
  KILN_ASSIGN_OR_RETURN(Expr e, regex_to_expr(pattern, false));
  GrammarBuilder b;
  const int32_t root = b.add("root", e);
  return b.build(root);
}

}  // namespace kiln::llm::structured
