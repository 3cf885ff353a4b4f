#include "llm/structured/utf8_ranges.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace kiln::llm::structured {
namespace {

int utf8_length(uint32_t cp) { return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4; }

void utf8_encode_fixed(uint32_t cp, int n, uint8_t* out) {
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
    return;
  }
  static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

void utf8_split(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates are not characters
    if (lo < 0xD800) utf8_split(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_split(0xE000, hi, out);
    return;
  }
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && max < hi) {
      utf8_split(lo, max, out);
      utf8_split(max + 1, hi, out);
      return;
    }
  }
  const int n = utf8_length(lo);
  // Split until every byte position's range is independent of the others.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  utf8_encode_fixed(lo, n, a);
  utf8_encode_fixed(hi, n, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out.push_back(std::move(seq));
}

}  // namespace

CodepointSet codepoint_set_normalize(CodepointSet set) {
  std::sort(set.begin(), set.end(), [](const CodepointRange& x, const CodepointRange& y) { return x.lo < y.lo; });
  CodepointSet out;
  for (const CodepointRange& r : set) {
    if (r.lo > r.hi) continue;
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodepointSet codepoint_set_complement(const CodepointSet& set) {
  CodepointSet out;
  uint32_t next = 0;
  for (const CodepointRange& r : codepoint_set_normalize(set)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return out;
}

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  utf8_split(lo, std::min(hi, kMaxCodepoint), out);
  return out;
}

Expr codepoint_set_expr(const CodepointSet& set, bool json_string) {
  std::vector<Expr> alternatives;
  CodepointSet plain = codepoint_set_normalize(set);
  std::vector<std::string> escapes;
  if (json_string) {
    // The characters that JSON writes only escaped leave the plain set and come back escaped.
    const CodepointSet specials = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    CodepointSet kept;
    for (const CodepointRange& r : plain) {
      for (uint32_t cp = r.lo; cp <= std::min<uint32_t>(r.hi, 0x5C); ++cp) {
        if (cp > 0x1F && cp != '"' && cp != '\\') continue;
        std::string escape;
        switch (cp) {
          case '"': escape = "\\\""; break;
          case '\\': escape = "\\\\"; break;
          case '\n': escape = "\\n"; break;
          case '\t': escape = "\\t"; break;
          case '\r': escape = "\\r"; break;
          case '\b': escape = "\\b"; break;
          case '\f': escape = "\\f"; break;
          default: {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04X", cp);
            escape = buf;
          }
        }
        escapes.push_back(escape);
      }
    }
    const CodepointSet allowed = codepoint_set_complement(specials);
    for (const CodepointRange& r : plain) {
      for (const CodepointRange& a : allowed) {
        const uint32_t lo = std::max(r.lo, a.lo), hi = std::min(r.hi, a.hi);
        if (lo <= hi) kept.push_back({lo, hi});
      }
    }
    plain = std::move(kept);
  }
  if (!escapes.empty()) alternatives.push_back(Expr::literal_set(std::move(escapes)));
  for (const CodepointRange& r : plain) {
    for (const auto& seq : utf8_sequences(r.lo, r.hi)) {
      std::vector<Expr> bytes;
      for (const auto& [lo, hi] : seq) bytes.push_back(Expr::bytes(lo, hi));
      alternatives.push_back(Expr::seq(std::move(bytes)));
    }
  }
  return Expr::alt(std::move(alternatives));
}

std::optional<uint32_t> read_hex_digits(std::string_view text, size_t& pos, size_t digits) {
  uint32_t v = 0;
  for (size_t i = 0; i < digits; ++i) {
    if (pos >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[pos]))) return std::nullopt;
    const char h = text[pos++];
    v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
  }
  return v;
}

}  // namespace kiln::llm::structured
