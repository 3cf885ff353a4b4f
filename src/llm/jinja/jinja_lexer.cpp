#include "llm/jinja/jinja_lexer.h"

#include <algorithm>
#include <cstdint>

#include "llm/jinja/jinja_value.h"

namespace kiln::llm::jinja {

Status template_error(int line, int column, const std::string& message) {
  return invalid_argument("chat template line " + std::to_string(line) + ", column " +
                          std::to_string(column) + ": " + message);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's str.rstrip() / str.lstrip() without arguments, on UTF-8 text.
std::string rstrip_all(std::string_view text) {
  auto cps = utf8_decode(text);
  while (!cps.empty() && is_python_space(cps.back())) cps.pop_back();
  return utf8_encode(cps);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Expected<std::vector<Token>> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string data = src_.substr(pos_, tag - pos_);
      size_t data_pos = pos_;
      if (tag == src_.size()) {
        emit_data(std::move(data), data_pos);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        data = rstrip_all(data);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop the spaces and tabs between the line start and the tag.
        size_t l_pos = data.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) &&
            std::all_of(data.begin() + static_cast<long>(l_pos), data.end(),
                        [](char c) { return c == ' ' || c == '\t'; })) {
          data.resize(l_pos);
        }
      }
      emit_data(std::move(data), data_pos);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      Status status = Status::ok();
      if (kind == '#') {
        status = lex_comment(tag);
      } else if (kind == '%' && is_raw_begin()) {
        status = lex_raw(tag);
      } else {
        status = lex_tag(tag, kind == '{');
      }
      KILN_RETURN_IF_ERROR(status);
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back(Token{TokenType::kEof, "", line_of(src_.size()), column_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  int line_of(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    return static_cast<int>(it - line_starts_.begin());
  }
  // Tokens arrive in source order, so the column is counted on from the previous one.
  int column_of(size_t pos) const {
    size_t start = line_starts_[static_cast<size_t>(line_of(pos) - 1)];
    if (column_pos_ < start || column_pos_ > pos) {
      column_pos_ = start;
      column_ = 1;
    }
    for (; column_pos_ < pos && column_pos_ < src_.size(); ++column_pos_) {
      if ((static_cast<unsigned char>(src_[column_pos_]) & 0xC0) != 0x80) ++column_;
    }
    return column_;
  }
  Status error_at(size_t pos, const std::string& message) const {
    return template_error(line_of(pos), column_of(pos), message);
  }
  void add(TokenType type, std::string text, size_t pos) {
    tokens_.push_back(Token{type, std::move(text), line_of(pos), column_of(pos)});
  }
  void emit_data(std::string data, size_t pos) {
    if (!data.empty()) add(TokenType::kData, std::move(data), pos);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // After a tag end: `-` strips all following whitespace, otherwise trim_blocks drops one newline
  // after block and comment tags.
  void after_tag_end(bool strip, bool trim_newline) {
    if (strip) {
      auto rest = utf8_decode(std::string_view(src_).substr(pos_));
      size_t skipped = 0;
      for (uint32_t cp : rest) {
        if (!is_python_space(cp)) break;
        std::string enc;
        utf8_append(enc, cp);
        skipped += enc.size();
      }
      pos_ += skipped;
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  Status lex_comment(size_t tag) {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return error_at(tag, "missing end of comment tag");
    bool strip = end > pos_ && src_[end - 1] == '-';
    pos_ = end + 2;
    after_tag_end(strip, true);
    return Status::ok();
  }

  // Matches `\s*raw\s*[-]?%}` at pos_ (just after `{%` and its sign).
  bool is_raw_begin() const {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (is_name_start(src_[p]) || is_digit(src_[p]))) return false;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  Status lex_raw(size_t tag) {
    size_t p = src_.find("%}", pos_);
    bool strip_after = src_[p - 1] == '-';
    pos_ = p + 2;
    after_tag_end(strip_after, false);  // jinja2 keeps the newline after `{% raw %}`
    // Find `{%[-+]?\s*endraw\s*[-+]?%}`.
    for (size_t i = pos_; i + 1 < src_.size(); ++i) {
      if (src_[i] != '{' || src_[i + 1] != '%') continue;
      size_t q = i + 2;
      char sign = q < src_.size() ? src_[q] : '\0';
      if (sign == '-' || sign == '+') ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      char end_sign = q < src_.size() ? src_[q] : '\0';
      if (end_sign == '-' || end_sign == '+') ++q;
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string data = src_.substr(pos_, i - pos_);
      if (sign == '-') {
        data = rstrip_all(data);
      } else if (sign != '+') {
        size_t l_pos = data.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        bool line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
        if ((l_pos > 0 || line_starting) &&
            std::all_of(data.begin() + static_cast<long>(l_pos), data.end(),
                        [](char c) { return c == ' ' || c == '\t'; })) {
          data.resize(l_pos);
        }
      }
      emit_data(std::move(data), pos_);
      pos_ = q + 2;
      after_tag_end(end_sign == '-', end_sign != '+');
      return Status::ok();
    }
    return error_at(tag, "missing end of raw directive ({% endraw %})");
  }

  Status lex_tag(size_t tag, bool is_var) {
    add(is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, is_var ? "{{" : "{%", tag);
    std::vector<char> brackets;
    const char end_char = is_var ? '}' : '%';
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) {
        return error_at(tag, std::string("unexpected end of template, expected '") +
                                 (is_var ? "}}" : "%}") + "'");
      }
      char c = src_[pos_];
      if (brackets.empty()) {
        // Tag end: `}}`, `-}}`, `%}`, `-%}`, `+%}`.
        size_t p = pos_;
        char sign = '\0';
        if ((c == '-' || (c == '+' && !is_var)) && p + 1 < src_.size() && src_[p + 1] == end_char) {
          sign = c;
          ++p;
        }
        if (src_.compare(p, 2, std::string(1, end_char) + "}") == 0) {
          add(is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, is_var ? "}}" : "%}", pos_);
          pos_ = p + 2;
          after_tag_end(sign == '-', !is_var && sign != '+');
          return Status::ok();
        }
      }
      size_t start = pos_;
      if (is_name_start(c)) {
        while (pos_ < src_.size() && (is_name_start(src_[pos_]) || is_digit(src_[pos_]))) ++pos_;
        add(TokenType::kName, src_.substr(start, pos_ - start), start);
      } else if (is_digit(c)) {
        KILN_RETURN_IF_ERROR(lex_number());
      } else if (c == '\'' || c == '"') {
        KILN_RETURN_IF_ERROR(lex_string());
      } else {
        static const char* const kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* two : kTwoChar) {
          if (src_.compare(pos_, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) == std::string_view::npos) {
            return error_at(pos_, std::string("unexpected character '") + c + "' in tag");
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          brackets.push_back(op[0]);
        } else if (op == ")" || op == "]" || op == "}") {
          char open = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (brackets.empty() || brackets.back() != open) {
            return error_at(pos_, "unexpected '" + op + "'");
          }
          brackets.pop_back();
        }
        pos_ += op.size();
        add(TokenType::kOperator, op, start);
      }
    }
  }

  Status lex_number() {
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (is_digit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                                              is_digit(src_[pos_ + 1])))) {
        ++pos_;
      }
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && is_digit(src_[p])) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    add(is_float ? TokenType::kFloat : TokenType::kInt, text, start);
    return Status::ok();
  }

  // Python string literal escapes, as jinja2 decodes them ("unicode-escape").
  Status lex_string() {
    size_t start = pos_;
    char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) return error_at(start, "unterminated string literal");
      char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= src_.size()) return error_at(start, "unterminated string literal");
      char e = src_[pos_++];
      auto hex = [&](int n) -> Expected<uint32_t> {
        if (pos_ + static_cast<size_t>(n) > src_.size()) return error_at(pos_, "truncated escape sequence");
        uint32_t cp = 0;
        for (int i = 0; i < n; ++i) {
          char h = src_[pos_++];
          cp <<= 4;
          if (is_digit(h)) cp |= static_cast<uint32_t>(h - '0');
          else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
          else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
          else return error_at(pos_ - 1, "invalid escape sequence in string literal");
        }
        return cp;
      };
      switch (e) {
        case '\n': break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'n': value += '\n'; break;
        case 'r': value += '\r'; break;
        case 't': value += '\t'; break;
        case 'v': value += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          KILN_ASSIGN_OR_RETURN(uint32_t cp, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
          if (cp > 0x10FFFF) return error_at(pos_, "escape sequence out of the Unicode range");
          utf8_append(value, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++i) {
              cp = cp * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            }
            utf8_append(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    add(TokenType::kString, std::move(value), start);
    return Status::ok();
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  mutable size_t column_pos_ = 0;
  mutable int column_ = 1;
};

}  // namespace

Expected<std::vector<Token>> tokenize(std::string_view source) {
  // jinja2 normalises every newline to "\n" and drops one trailing newline.
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text += source[i];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return Lexer(std::move(text)).run();
}

}  // namespace kiln::llm::jinja
