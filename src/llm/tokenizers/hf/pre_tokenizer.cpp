#include "llm/tokenizers/hf/pre_tokenizer.h"

#include <utf8proc.h>

#include <functional>
#include <utility>

#include "llm/tokenizers/bpe/bpe_regex.h"
#include "llm/tokenizers/bpe/bpe_text.h"
#include "llm/tokenizers/hf/hf_tokenizer_json.h"

namespace kiln::llm {
namespace {

struct Span {
  size_t start;
  size_t end;
  bool is_match;
};

// Cuts `piece` at the matched spans by `behavior` (the library's NormalizedString::split) and
// appends the non-empty results to `out`. `spans` covers the text in order.
void split_piece(const PreTokenPiece& piece, const std::vector<Span>& spans, SplitBehavior behavior,
                 std::vector<PreTokenPiece>& out) {
  std::vector<Span> kept;
  kept.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) kept.push_back({s.start, s.end, false});
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().start = it->start;
        } else {
          kept.push_back({it->start, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Span& s : kept) {
    if (s.end <= s.start) continue;
    out.push_back({piece.text.substr(s.start, s.end - s.start), piece.at_origin && s.start == 0});
  }
}

// Spans of `text` from (start, end) matches; `invert` flips which spans count as matches.
std::vector<Span> spans_from_matches(const std::string& text, const std::vector<std::pair<size_t, size_t>>& matches,
                                     bool invert) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [start, end] : matches) {
    if (prev != start) spans.push_back({prev, start, invert});
    spans.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});
  return spans;
}

std::vector<std::pair<size_t, size_t>> regex_matches(const Regex& regex, const std::string& text) {
  std::vector<std::pair<size_t, size_t>> matches;
  regex.find_all(text, [&](size_t start, size_t end) { matches.emplace_back(start, end); });
  return matches;
}

// Matches of single characters for which pred(code point) holds.
template <typename Pred>
std::vector<std::pair<size_t, size_t>> char_matches(const std::string& text, Pred&& pred) {
  std::vector<std::pair<size_t, size_t>> matches;
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    int len = utf8_decode(text, pos, &cp);
    if (len == 0) {
      len = 1;
      cp = kReplacementChar;
    }
    if (pred(cp)) matches.emplace_back(pos, pos + static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
  }
  return matches;
}

// Runs fn(piece, out) for each piece, replacing the list.
template <typename Fn>
void for_each_piece(std::vector<PreTokenPiece>& pieces, Fn&& fn) {
  std::vector<PreTokenPiece> out;
  out.reserve(pieces.size() * 2);
  for (const PreTokenPiece& piece : pieces) fn(piece, out);
  pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<PreTokenPiece>& pieces) const override {
    for_each_piece(pieces, [&](const PreTokenPiece& piece, std::vector<PreTokenPiece>& out) {
      split_piece(piece, spans_from_matches(piece.text, regex_matches(pattern_, piece.text), invert_), behavior_, out);
    });
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void split(std::vector<PreTokenPiece>& pieces) const override {
    for_each_piece(pieces, [&](const PreTokenPiece& piece, std::vector<PreTokenPiece>& out) {
      if (piece.text.empty()) return;
      PreTokenPiece prefixed = piece;
      if (add_prefix_space_ && prefixed.text[0] != ' ') prefixed.text.insert(0, 1, ' ');
      const size_t first = out.size();
      if (regex_) {
        split_piece(prefixed, spans_from_matches(prefixed.text, regex_matches(*regex_, prefixed.text), false),
                    SplitBehavior::kIsolated, out);
      } else {
        out.push_back(std::move(prefixed));
      }
      for (size_t i = first; i < out.size(); ++i) out[i].text = byte_level_encode(out[i].text);
    });
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    char32_t cp = 0;
    utf8_decode(replacement_, 0, &cp);
    replacement_char_ = cp;
  }
  void split(std::vector<PreTokenPiece>& pieces) const override {
    for_each_piece(pieces, [&](const PreTokenPiece& piece, std::vector<PreTokenPiece>& out) {
      PreTokenPiece replaced{std::string(), piece.at_origin};
      replaced.text.reserve(piece.text.size() + replacement_.size());
      for (char c : piece.text) {
        if (c == ' ') {
          replaced.text += replacement_;
        } else {
          replaced.text += c;
        }
      }
      if (replaced.text.empty()) return;
      const bool starts = replaced.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_origin))) {
        replaced.text.insert(0, replacement_);
      }
      if (!split_) {
        out.push_back(std::move(replaced));
        return;
      }
      const char32_t rep = replacement_char_;
      split_piece(replaced,
                  spans_from_matches(replaced.text, char_matches(replaced.text, [rep](char32_t c) { return c == rep; }),
                                     false),
                  SplitBehavior::kMergedWithNext, out);
    });
  }

 private:
  std::string replacement_;
  char32_t replacement_char_ = 0;
  PrependScheme scheme_;
  bool split_;
};

bool is_numeric(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void split(std::vector<PreTokenPiece>& pieces) const override {
    for_each_piece(pieces, [&](const PreTokenPiece& piece, std::vector<PreTokenPiece>& out) {
      split_piece(piece, spans_from_matches(piece.text, char_matches(piece.text, is_numeric), false),
                  individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, out);
    });
  }

 private:
  bool individual_;
};

// Whitespace: runs of word characters and runs of other non-space characters.
class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  explicit WhitespacePreTokenizer(Regex words) : words_(std::move(words)) {}
  void split(std::vector<PreTokenPiece>& pieces) const override {
    for_each_piece(pieces, [&](const PreTokenPiece& piece, std::vector<PreTokenPiece>& out) {
      split_piece(piece, spans_from_matches(piece.text, regex_matches(words_, piece.text), true),
                  SplitBehavior::kRemoved, out);
    });
  }

 private:
  Regex words_;
};

class WhitespaceSplitPreTokenizer final : public PreTokenizer {
 public:
  void split(std::vector<PreTokenPiece>& pieces) const override {
    for_each_piece(pieces, [&](const PreTokenPiece& piece, std::vector<PreTokenPiece>& out) {
      split_piece(piece, spans_from_matches(piece.text, char_matches(piece.text, unicode_is_whitespace), false),
                  SplitBehavior::kRemoved, out);
    });
  }
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<PreTokenPiece>& pieces) const override {
    for (const auto& part : parts_) part->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Expected<SplitBehavior> parse_behavior(const nlohmann::json& json, const std::string& where) {
  KILN_ASSIGN_OR_RETURN(std::string name, hf_json_string(json, "behavior", where));
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument(where + ".behavior '" + name +
                          "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

}  // namespace

Expected<std::unique_ptr<PreTokenizer>> pre_tokenizer_byte_level(bool add_prefix_space, bool use_regex) {
  std::optional<Regex> regex;
  if (use_regex) {
    KILN_ASSIGN_OR_RETURN(Regex compiled, Regex::compile(kGpt2SplitPattern));
    regex = std::move(compiled);
  }
  return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(add_prefix_space, std::move(regex)));
}

Expected<std::unique_ptr<PreTokenizer>> pre_tokenizer_from_json(const nlohmann::json& json, const std::string& where) {
  if (json.is_null()) return std::unique_ptr<PreTokenizer>();
  KILN_ASSIGN_OR_RETURN(std::string type, hf_json_type(json, where));
  if (type == "ByteLevel") {
    KILN_ASSIGN_OR_RETURN(bool add_prefix_space, hf_json_bool(json, "add_prefix_space", true, where));
    KILN_ASSIGN_OR_RETURN(bool use_regex, hf_json_bool(json, "use_regex", true, where));
    return pre_tokenizer_byte_level(add_prefix_space, use_regex);
  }
  if (type == "Split") {
    KILN_ASSIGN_OR_RETURN(Regex pattern, hf_json_pattern(json, "pattern", where));
    KILN_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(json, where));
    KILN_ASSIGN_OR_RETURN(bool invert, hf_json_bool(json, "invert", false, where));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(pattern), behavior, invert));
  }
  if (type == "Metaspace") {
    KILN_ASSIGN_OR_RETURN(std::string replacement, hf_json_string(json, "replacement", where));
    if (replacement.empty() || utf8_length(replacement) != 1) {
      return invalid_argument(where + ".replacement must be exactly one character");
    }
    PrependScheme scheme = PrependScheme::kAlways;
    if (auto it = json.find("prepend_scheme"); it != json.end() && !it->is_null()) {
      const std::string name = it->is_string() ? it->get<std::string>() : "";
      if (name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return invalid_argument(where + ".prepend_scheme must be \"always\", \"first\" or \"never\"");
      }
    } else {
      KILN_ASSIGN_OR_RETURN(bool add_prefix_space, hf_json_bool(json, "add_prefix_space", true, where));
      scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    KILN_ASSIGN_OR_RETURN(bool split, hf_json_bool(json, "split", true, where));
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(std::move(replacement), scheme, split));
  }
  if (type == "Digits") {
    KILN_ASSIGN_OR_RETURN(bool individual, hf_json_bool(json, "individual_digits", false, where));
    return std::unique_ptr<PreTokenizer>(new DigitsPreTokenizer(individual));
  }
  if (type == "Whitespace") {
    KILN_ASSIGN_OR_RETURN(Regex words, Regex::compile("\\w+|[^\\w\\s]+"));
    return std::unique_ptr<PreTokenizer>(new WhitespacePreTokenizer(std::move(words)));
  }
  if (type == "WhitespaceSplit") return std::unique_ptr<PreTokenizer>(new WhitespaceSplitPreTokenizer());
  if (type == "Sequence") {
    auto it = json.find("pretokenizers");
    if (it == json.end() || !it->is_array()) return invalid_argument(where + ".pretokenizers must be an array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> part,
                            pre_tokenizer_from_json((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]"));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  return unimplemented(where + ".type '" + type +
                       "' is not supported (supported: ByteLevel, Split, Metaspace, Digits, Whitespace, "
                       "WhitespaceSplit, Sequence)");
}

}  // namespace kiln::llm
