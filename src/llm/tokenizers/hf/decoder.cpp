#include "llm/tokenizers/hf/decoder.h"

#include <utility>

#include "llm/tokenizers/bpe/bpe_regex.h"
#include "llm/tokenizers/bpe/bpe_text.h"
#include "llm/tokenizers/hf/hf_tokenizer_json.h"

namespace kiln::llm {
namespace {

class ByteLevelDecoder final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      // A token with a character outside the byte alphabet (an added token such as
      // "<|im_start|>" is inside it, but not every one is) is taken as its own UTF-8 bytes.
      const size_t mark = bytes.size();
      bool all_mapped = true;
      size_t pos = 0;
      char32_t cp = 0;
      while (pos < token.size()) {
        const int len = utf8_decode(token, pos, &cp);
        std::optional<uint8_t> b = len > 0 ? byte_level_byte(cp) : std::nullopt;
        if (!b) {
          all_mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(*b));
        pos += static_cast<size_t>(len);
      }
      if (!all_mapped) {
        bytes.resize(mark);
        bytes += token;
      }
    }
    tokens.assign(1, decoder_utf8_lossy(bytes));
  }
};

class ByteFallbackDecoder final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      if (std::optional<uint8_t> byte = parse_byte_token(token)) {
        pending.push_back(static_cast<char>(*byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  // "<0xXX>": six bytes; the two between "<0x" and ">" parse as a hex byte the way Rust's
  // u8::from_str_radix does (an optional '+' sign, then hex digits).
  static std::optional<uint8_t> parse_byte_token(const std::string& token) {
    if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const char a = token[3];
    const char b = token[4];
    if (a == '+') {
      const int v = hex(b);
      if (v < 0) return std::nullopt;
      return static_cast<uint8_t>(v);
    }
    const int hi = hex(a);
    const int lo = hex(b);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<uint8_t>(hi * 16 + lo);
  }
};

class FuseDecoder final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& t : tokens) joined += t;
    tokens.assign(1, std::move(joined));
  }
};

class StripDecoder final : public TokenDecoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      // Work on character boundaries: up to start_ leading and stop_ trailing copies of content_.
      std::vector<size_t> bounds;  // byte offset of each character, plus the end
      for (size_t i = 0; i < token.size(); ++i) {
        if ((static_cast<unsigned char>(token[i]) & 0xC0) != 0x80) bounds.push_back(i);
      }
      bounds.push_back(token.size());
      const size_t chars = bounds.size() - 1;
      auto char_at = [&](size_t i) { return std::string_view(token).substr(bounds[i], bounds[i + 1] - bounds[i]); };
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars) && char_at(i) == content_; ++i) start_cut = i + 1;
      size_t stop_cut = chars;
      for (size_t i = 0; i < std::min(stop_, chars) && char_at(chars - i - 1) == content_; ++i) stop_cut = chars - i - 1;
      if (stop_cut <= start_cut) {
        token.clear();
      } else {
        token = token.substr(bounds[start_cut], bounds[stop_cut] - bounds[start_cut]);
      }
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

class ReplaceDecoder final : public TokenDecoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::string out;
      size_t last = 0;
      pattern_.find_all(token, [&](size_t start, size_t end) {
        if (end == start) return;
        out.append(token, last, start - last);
        out += content_;
        last = end;
      });
      if (last == 0 && out.empty()) continue;
      out.append(token, last, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  Regex pattern_;
  std::string content_;
};

class MetaspaceDecoder final : public TokenDecoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // The reference drops every replacement character of the first token (not only a leading
      // one) when a prefix was prepended on encode; elsewhere each becomes a space.
      const std::string_view with = i == 0 && strip_first_ ? std::string_view() : std::string_view(" ");
      std::string out;
      size_t pos = 0;
      const std::string& token = tokens[i];
      while (true) {
        const size_t hit = token.find(replacement_, pos);
        if (hit == std::string::npos) break;
        out.append(token, pos, hit - pos);
        out += with;
        pos = hit + replacement_.size();
      }
      out.append(token, pos, std::string::npos);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public TokenDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenDecoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& part : parts_) part->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> parts_;
};

}  // namespace

std::string decoder_utf8_lossy(std::string_view bytes) { return utf8_sanitize(bytes); }

std::unique_ptr<TokenDecoder> decoder_byte_level() { return std::make_unique<ByteLevelDecoder>(); }

Expected<std::unique_ptr<TokenDecoder>> decoder_from_json(const nlohmann::json& json, const std::string& where) {
  if (json.is_null()) return std::unique_ptr<TokenDecoder>();
  KILN_ASSIGN_OR_RETURN(std::string type, hf_json_type(json, where));
  if (type == "ByteLevel") return decoder_byte_level();
  if (type == "ByteFallback") return std::unique_ptr<TokenDecoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<TokenDecoder>(new FuseDecoder());
  if (type == "Strip") {
    KILN_ASSIGN_OR_RETURN(std::string content, hf_json_string(json, "content", where));
    if (utf8_length(content) != 1) return invalid_argument(where + ".content must be exactly one character");
    KILN_ASSIGN_OR_RETURN(int64_t start, hf_json_uint(json, "start", 0, where));
    KILN_ASSIGN_OR_RETURN(int64_t stop, hf_json_uint(json, "stop", 0, where));
    return std::unique_ptr<TokenDecoder>(
        new StripDecoder(std::move(content), static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Replace") {
    KILN_ASSIGN_OR_RETURN(Regex pattern, hf_json_pattern(json, "pattern", where));
    KILN_ASSIGN_OR_RETURN(std::string content, hf_json_string(json, "content", where));
    return std::unique_ptr<TokenDecoder>(new ReplaceDecoder(std::move(pattern), std::move(content)));
  }
  if (type == "Metaspace") {
    KILN_ASSIGN_OR_RETURN(std::string replacement, hf_json_string(json, "replacement", where));
    if (utf8_length(replacement) != 1) return invalid_argument(where + ".replacement must be exactly one character");
    bool strip_first = true;
    if (auto it = json.find("prepend_scheme"); it != json.end() && !it->is_null()) {
      if (!it->is_string()) return invalid_argument(where + ".prepend_scheme must be a string");
      strip_first = it->get<std::string>() != "never";
    } else {
      KILN_ASSIGN_OR_RETURN(strip_first, hf_json_bool(json, "add_prefix_space", true, where));
    }
    return std::unique_ptr<TokenDecoder>(new MetaspaceDecoder(std::move(replacement), strip_first));
  }
  if (type == "Sequence") {
    auto it = json.find("decoders");
    if (it == json.end() || !it->is_array()) return invalid_argument(where + ".decoders must be an array");
    std::vector<std::unique_ptr<TokenDecoder>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(std::unique_ptr<TokenDecoder> part,
                            decoder_from_json((*it)[i], where + ".decoders[" + std::to_string(i) + "]"));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<TokenDecoder>(new SequenceDecoder(std::move(parts)));
  }
  return unimplemented(where + ".type '" + type +
                       "' is not supported (supported: ByteLevel, ByteFallback, Metaspace, Fuse, Strip, Replace, "
                       "Sequence)");
}

}  // namespace kiln::llm
