#include "llm/tokenizers/hf/hf_tokenizer_added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "llm/tokenizers/bpe/bpe_text.h"

namespace kiln::llm {
namespace {

// A word character as the Rust regex crate's Unicode \w sees it.
bool is_word_char(char32_t c) {
  if (c == '_' || c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

char32_t first_char(std::string_view text) {
  char32_t cp = 0;
  return utf8_decode(text, 0, &cp) > 0 ? cp : kReplacementChar;
}

size_t last_char_start(std::string_view text) {
  size_t pos = text.size() - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

char32_t last_char(std::string_view text) { return first_char(text.substr(last_char_start(text))); }

// Start of the run of whitespace that ends `text`.
size_t whitespace_run_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t start = last_char_start(text.substr(0, end));
    if (!unicode_is_whitespace(first_char(text.substr(start)))) break;
    end = start;
  }
  return end;
}

// Length of the run of whitespace that begins `text`.
size_t whitespace_run_length(std::string_view text) {
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    const int len = utf8_decode(text, pos, &cp);
    if (len == 0 || !unicode_is_whitespace(cp)) break;
    pos += static_cast<size_t>(len);
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<Entry> entries) : entries_(std::move(entries)) {
  int32_t nodes = 1;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const std::string& pattern = entries_[i].pattern;
    if (pattern.empty()) continue;
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
    int32_t node = 0;
    for (char c : pattern) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
      auto [it, inserted] = edges_.try_emplace(key, nodes);
      if (inserted) ++nodes;
      node = it->second;
    }
    terminal_.try_emplace(node, static_cast<int32_t>(i));  // the first of equal patterns wins
  }
}

std::vector<AddedTokenMatcher::Split> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Split> splits;
  if (text.empty()) {
    splits.push_back({0, 0, -1});
    return splits;
  }
  // 1. Leftmost-longest, non-overlapping matches.
  struct Match {
    size_t start;
    size_t end;
    int32_t entry;
  };
  std::vector<Match> matches;
  if (!entries_.empty()) {
    size_t i = 0;
    while (i < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      int32_t node = 0;
      int32_t best = -1;
      size_t best_end = i;
      for (size_t j = i; j < text.size(); ++j) {
        auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[j]));
        if (it == edges_.end()) break;
        node = it->second;
        if (auto t = terminal_.find(node); t != terminal_.end()) {
          best = t->second;
          best_end = j + 1;
        }
      }
      if (best >= 0) {
        matches.push_back({i, best_end, best});
        i = best_end;
      } else {
        ++i;
      }
    }
  }
  // 2. The library's per-match rules.
  size_t start_offset = 0;
  for (const Match& m : matches) {
    const HfAddedToken& token = *entries_[static_cast<size_t>(m.entry)].token;
    size_t start = m.start;
    size_t stop = m.end;
    if (token.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool stop_space = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(whitespace_run_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += whitespace_run_length(text.substr(stop));
    if (start_offset < start) splits.push_back({start_offset, start, -1});
    splits.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) splits.push_back({start_offset, text.size(), -1});
  return splits;
}

}  // namespace kiln::llm
