// Sets of Unicode code points as grammar expressions over UTF-8 bytes. A set is a list of
// inclusive ranges; codepoint_set_expr turns it into alternatives of byte-range sequences (the
// UTF-8 encodings of the set, surrogates excluded), optionally as the characters are written
// inside a JSON string (quote, backslash and control characters by their escapes).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "llm/structured/grammar.h"

namespace kiln::llm::structured {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

struct CodepointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
};
using CodepointSet = std::vector<CodepointRange>;

// Sorted, overlaps and neighbours merged.
CodepointSet codepoint_set_normalize(CodepointSet set);
// Every code point in [0, kMaxCodepoint] not in `set`.
CodepointSet codepoint_set_complement(const CodepointSet& set);

// The UTF-8 encodings of `set` as byte-range sequences: each inner list is one sequence of
// (lo, hi) byte ranges, all of one encoded length.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi);

// One character of `set`. json_string: as written inside a JSON string, so '"', '\' and U+0000
// to U+001F appear only escaped (\", \\, \n, \t, \r, \b, \f, \u00XX).
Expr codepoint_set_expr(const CodepointSet& set, bool json_string);

// The value of `digits` hex digits of `text` from `pos` (a \x or \u escape's), `pos` moved past
// them; nothing when one of them is missing or not a hex digit.
std::optional<uint32_t> read_hex_digits(std::string_view text, size_t& pos, size_t digits);

}  // namespace kiln::llm::structured
