#include "llm/tokenizers/bpe/bpe_text.h"

#include <array>

namespace kiln::llm {
namespace {

// Byte -> code point table of the byte-level alphabet, and its UTF-8 spelling.
struct ByteLevelTables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8{};
  std::array<int16_t, 512> from_char{};  // code point (< 512) -> byte, or -1

  ByteLevelTables() {
    from_char.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      from_char[to_char[b]] = static_cast<int16_t>(b);
      utf8_append(to_utf8[b], to_char[b]);
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

int utf8_decode(std::string_view text, size_t pos, char32_t* code_point) {
  const size_t n = text.size() - pos;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data() + pos);
  if (n == 0) return 0;
  const unsigned char c0 = s[0];
  if (c0 < 0x80) {
    *code_point = c0;
    return 1;
  }
  auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    if (!cont(1)) return 0;
    *code_point = (char32_t(c0 & 0x1F) << 6) | (s[1] & 0x3F);
    return 2;
  }
  if (c0 >= 0xE0 && c0 <= 0xEF) {
    if (n < 2) return 0;
    const unsigned char c1 = s[1];
    const unsigned char lo = c0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = c0 == 0xED ? 0x9F : 0xBF;
    if (c1 < lo || c1 > hi || !cont(2)) return 0;
    *code_point = (char32_t(c0 & 0x0F) << 12) | (char32_t(c1 & 0x3F) << 6) | (s[2] & 0x3F);
    return 3;
  }
  if (c0 >= 0xF0 && c0 <= 0xF4) {
    if (n < 2) return 0;
    const unsigned char c1 = s[1];
    const unsigned char lo = c0 == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = c0 == 0xF4 ? 0x8F : 0xBF;
    if (c1 < lo || c1 > hi || !cont(2) || !cont(3)) return 0;
    *code_point = (char32_t(c0 & 0x07) << 18) | (char32_t(c1 & 0x3F) << 12) |
                  (char32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
  }
  return 0;
}

size_t utf8_invalid_length(std::string_view text, size_t pos) {
  const size_t n = text.size() - pos;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data() + pos);
  const unsigned char c0 = s[0];
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 1;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 2;
    if (c0 == 0xE0) lo = 0xA0;
    if (c0 == 0xED) hi = 0x9F;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 3;
    if (c0 == 0xF0) lo = 0x90;
    if (c0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  // The lead byte plus every continuation byte that keeps the prefix valid.
  size_t len = 1;
  for (size_t i = 1; i <= need && i < n; ++i) {
    const unsigned char c = s[i];
    const bool ok = i == 1 ? (c >= lo && c <= hi) : (c & 0xC0) == 0x80;
    if (!ok) break;
    ++len;
  }
  return len;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool utf8_is_valid(std::string_view text) {
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int len = utf8_decode(text, pos, &cp);
    if (len == 0) return false;
    pos += static_cast<size_t>(len);
  }
  return true;
}

std::string utf8_sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    const int len = utf8_decode(text, pos, &cp);
    if (len > 0) {
      out.append(text.substr(pos, static_cast<size_t>(len)));
      pos += static_cast<size_t>(len);
    } else {
      utf8_append(out, kReplacementChar);
      pos += utf8_invalid_length(text, pos);
    }
  }
  return out;
}

size_t utf8_length(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

char32_t byte_level_char(uint8_t byte) { return byte_level_tables().to_char[byte]; }

std::optional<uint8_t> byte_level_byte(char32_t code_point) {
  if (code_point >= 512) return std::nullopt;
  const int16_t b = byte_level_tables().from_char[code_point];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

void byte_level_encode_append(std::string_view bytes, std::string& out) {
  const ByteLevelTables& tables = byte_level_tables();
  for (char c : bytes) out += tables.to_utf8[static_cast<unsigned char>(c)];
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  byte_level_encode_append(bytes, out);
  return out;
}

}  // namespace kiln::llm

namespace kiln::llm {

bool unicode_is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace kiln::llm
