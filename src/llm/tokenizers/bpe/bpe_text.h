// Text helpers shared by the BPE tokenizers: UTF-8 decoding and repair, and GPT-2's reversible
// byte <-> printable-character mapping that byte-level BPE vocabularies are keyed by.
// Everything here is pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::llm {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes one code point of `text` at `pos`. Returns its length in bytes (1..4), or 0 when the
// bytes there are not valid UTF-8 (overlong, surrogate, out of range, truncated).
int utf8_decode(std::string_view text, size_t pos, char32_t* code_point);

// Length in bytes of the maximal prefix of text[pos..] that could start a valid sequence but is
// not one (at least 1). Used to replace invalid bytes the way Unicode's "maximal subpart" rule
// (and Rust's String::from_utf8_lossy) does: one U+FFFD per maximal invalid subpart.
size_t utf8_invalid_length(std::string_view text, size_t pos);

void utf8_append(std::string& out, char32_t code_point);

bool utf8_is_valid(std::string_view text);

// `text` with every invalid subsequence replaced by U+FFFD (from_utf8_lossy semantics).
std::string utf8_sanitize(std::string_view text);

// Number of code points in valid UTF-8 `text`.
size_t utf8_length(std::string_view text);

// GPT-2's byte-level alphabet: each byte maps to one printable code point (printable Latin-1
// bytes map to themselves, the others to U+0100 upwards), so any byte string becomes a string of
// vocabulary characters.
char32_t byte_level_char(uint8_t byte);
// The byte behind a byte-level character, if it is one.
std::optional<uint8_t> byte_level_byte(char32_t code_point);
// Maps each byte of `bytes` through byte_level_char, as UTF-8.
std::string byte_level_encode(std::string_view bytes);
void byte_level_encode_append(std::string_view bytes, std::string& out);

}  // namespace kiln::llm

namespace kiln::llm {

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool unicode_is_whitespace(char32_t code_point);

}  // namespace kiln::llm
