#include "llm/tokenizers/hf/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "llm/tokenizers/bpe/bpe_regex.h"
#include "llm/tokenizers/bpe/bpe_text.h"
#include "llm/tokenizers/hf/hf_tokenizer_json.h"

namespace kiln::llm {
namespace {

// Unicode normalization forms through utf8proc.
class UnicodeFormNormalizer final : public Normalizer {
 public:
  explicit UnicodeFormNormalizer(int options) : options_(options) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                            static_cast<utf8proc_option_t>(options_));
    if (n < 0) return std::string(text);  // input is sanitized UTF-8, so this does not happen
    std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
    return out;
  }

 private:
  int options_;
};

// Applies `fn(code_point, out)` to every character.
template <typename Fn>
std::string map_chars(std::string_view text, Fn&& fn) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    const int len = utf8_decode(text, pos, &cp);
    if (len == 0) {
      cp = kReplacementChar;
      pos += utf8_invalid_length(text, pos);
    } else {
      pos += static_cast<size_t>(len);
    }
    fn(cp, out);
  }
  return out;
}

class LowercaseNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    return map_chars(text, [](char32_t c, std::string& out) {
      if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
        out += "i\xCC\x87";
        return;
      }
      utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    });
  }
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    return map_chars(text, [](char32_t c, std::string& out) {
      const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) return;
      utf8_append(out, c);
    });
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    size_t begin = 0;
    size_t end = text.size();
    char32_t cp = 0;
    if (left_) {
      while (begin < end) {
        const int len = utf8_decode(text, begin, &cp);
        if (len == 0 || !unicode_is_whitespace(cp)) break;
        begin += static_cast<size_t>(len);
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        const int len = utf8_decode(text, start, &cp);
        if (len == 0 || !unicode_is_whitespace(cp)) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_;
  bool right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};  // the reference prepends nothing to an empty string
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    size_t last = 0;
    pattern_.find_all(text, [&](size_t start, size_t end) {
      if (end == start) return;
      out.append(text.substr(last, start - last));
      out += content_;
      last = end;
    });
    out.append(text.substr(last));
    return out;
  }

 private:
  Regex pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string_view text) const override {
    std::string current(text);
    for (const auto& part : parts_) current = part->normalize(current);
    return current;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

Expected<std::unique_ptr<Normalizer>> normalizer_from_json(const nlohmann::json& json, const std::string& where) {
  if (json.is_null()) return std::unique_ptr<Normalizer>();
  KILN_ASSIGN_OR_RETURN(std::string type, hf_json_type(json, where));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  if (type == "NFKC") {
    return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "NFKD") {
    return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Strip") {
    KILN_ASSIGN_OR_RETURN(bool left, hf_json_bool(json, "strip_left", true, where));
    KILN_ASSIGN_OR_RETURN(bool right, hf_json_bool(json, "strip_right", true, where));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Prepend") {
    KILN_ASSIGN_OR_RETURN(std::string prefix, hf_json_string(json, "prepend", where));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Replace") {
    KILN_ASSIGN_OR_RETURN(Regex pattern, hf_json_pattern(json, "pattern", where));
    KILN_ASSIGN_OR_RETURN(std::string content, hf_json_string(json, "content", where));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern), std::move(content)));
  }
  if (type == "Sequence") {
    auto it = json.find("normalizers");
    if (it == json.end() || !it->is_array()) return invalid_argument(where + ".normalizers must be an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> part,
                            normalizer_from_json((*it)[i], where + ".normalizers[" + std::to_string(i) + "]"));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return unimplemented(where + ".type '" + type +
                       "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, "
                       "Prepend, Replace, Sequence)");
}

}  // namespace kiln::llm
