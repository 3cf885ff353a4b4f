#include "llm/tokenizers/bpe/tiktoken.h"

#include <unordered_map>
#include <vector>

#include "llm/tokenizers/bpe/bpe_merge.h"
#include "llm/tokenizers/bpe/bpe_model.h"
#include "llm/tokenizers/bpe/bpe_regex.h"
#include "llm/tokenizers/bpe/bpe_text.h"
#include "llm/tokenizers/hf/hf_tokenizer_added_tokens.h"

namespace kiln::llm {
namespace {

// Standard base64 with optional '=' padding; nullopt when `text` is not base64.
std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6) return std::nullopt;  // a dangling character carries no whole byte
  return out;
}

class TiktokenTokenizer final : public Tokenizer {
 public:
  TiktokenTokenizer(BpeVocab ranks, std::vector<std::string> by_rank, std::vector<bool> has_rank, Regex pattern,
                    std::vector<HfAddedToken> specials)
      : ranks_(std::move(ranks)),
        by_rank_(std::move(by_rank)),
        has_rank_(std::move(has_rank)),
        pattern_(std::move(pattern)),
        specials_(std::move(specials)) {
    std::vector<AddedTokenMatcher::Entry> entries;
    for (const HfAddedToken& token : specials_) {
      entries.push_back({token.content, &token});
      special_by_id_[token.id] = &token;
      id_limit_ = std::max<int64_t>(id_limit_, int64_t{token.id} + 1);
    }
    id_limit_ = std::max<int64_t>(id_limit_, static_cast<int64_t>(by_rank_.size()));
    matcher_ = AddedTokenMatcher(std::move(entries));
    for (int b = 0; b < 256; ++b) {
      auto it = ranks_.find(std::string(1, static_cast<char>(b)));
      byte_rank_[b] = it == ranks_.end() ? -1 : it->second;
    }
  }

  Expected<std::vector<int32_t>> encode(std::string_view input, bool /*add_special_tokens*/) const override {
    std::string repaired;
    std::string_view text = input;
    if (!utf8_is_valid(input)) {
      repaired = utf8_sanitize(input);
      text = repaired;
    }
    std::vector<int32_t> ids;
    Status status;
    for (const AddedTokenMatcher::Split& split : matcher_.split(text)) {
      if (split.id >= 0) {
        ids.push_back(split.id);
        continue;
      }
      const std::string_view segment = text.substr(split.start, split.end - split.start);
      pattern_.find_all(segment, [&](size_t start, size_t end) {
        if (status.is_ok() && end > start) status = encode_piece(segment.substr(start, end - start), ids);
      });
      KILN_RETURN_IF_ERROR(status);
    }
    return ids;
  }

  Expected<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    std::string bytes;
    for (int32_t id : ids) {
      if (auto it = special_by_id_.find(id); it != special_by_id_.end()) {
        if (!skip_special_tokens) bytes += it->second->content;
        continue;
      }
      if (id < 0 || static_cast<size_t>(id) >= by_rank_.size() || !has_rank_[static_cast<size_t>(id)]) {
        return invalid_argument("token id " + std::to_string(id) + " is not in the vocabulary (ids are 0.." +
                                std::to_string(id_limit_ - 1) + ")");
      }
      bytes += by_rank_[static_cast<size_t>(id)];
    }
    return utf8_sanitize(bytes);
  }

  int64_t vocab_size() const override { return id_limit_; }

  // Tokens are raw bytes here; a token is named by its bytes (as a string).
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (const HfAddedToken& t : specials_) {
      if (t.content == token) return t.id;
    }
    auto it = ranks_.find(token);
    if (it == ranks_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    if (auto it = special_by_id_.find(id); it != special_by_id_.end()) return it->second->content;
    if (id < 0 || static_cast<size_t>(id) >= by_rank_.size() || !has_rank_[static_cast<size_t>(id)]) return std::nullopt;
    return by_rank_[static_cast<size_t>(id)];
  }
  bool is_special(int32_t id) const override { return special_by_id_.count(id) != 0; }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return token_to_id("<|endoftext|>"); }

 private:
  Status encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
    if (auto it = ranks_.find(piece); it != ranks_.end()) {
      ids.push_back(it->second);
      return Status::ok();
    }
    std::vector<BpeSymbol> symbols(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) {
      const int32_t rank = byte_rank_[static_cast<unsigned char>(piece[i])];
      if (rank < 0) {
        return invalid_argument("the tiktoken file has no rank for byte " +
                                std::to_string(static_cast<unsigned char>(piece[i])));
      }
      symbols[i] = {rank, static_cast<int32_t>(i) - 1, i + 1 < piece.size() ? static_cast<int32_t>(i + 1) : -1,
                    static_cast<uint32_t>(i), 1};
    }
    bpe_merge_all(symbols, [&](const BpeSymbol& left, const BpeSymbol& right) -> std::optional<BpeMergeTarget> {
      auto it = ranks_.find(piece.substr(left.start, left.len + right.len));
      if (it == ranks_.end()) return std::nullopt;
      return BpeMergeTarget{it->second, it->second};
    });
    for (const BpeSymbol& s : symbols) {
      if (s.len > 0) ids.push_back(s.id);
    }
    return Status::ok();
  }

  BpeVocab ranks_;
  std::vector<std::string> by_rank_;
  std::vector<bool> has_rank_;
  Regex pattern_;
  std::vector<HfAddedToken> specials_;
  std::unordered_map<int32_t, const HfAddedToken*> special_by_id_;
  AddedTokenMatcher matcher_;
  int32_t byte_rank_[256] = {};
  int64_t id_limit_ = 0;
};

}  // namespace

std::map<std::string, int32_t> tiktoken_cl100k_special_tokens() {
  return {{"<|endoftext|>", 100257},
          {"<|fim_prefix|>", 100258},
          {"<|fim_middle|>", 100259},
          {"<|fim_suffix|>", 100260},
          {"<|endofprompt|>", 100276}};
}

std::map<std::string, int32_t> tiktoken_o200k_special_tokens() {
  return {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
}

Expected<std::unique_ptr<Tokenizer>> tiktoken_tokenizer(std::string_view tiktoken_file, std::string_view pattern,
                                                        const std::map<std::string, int32_t>& special_tokens) {
  BpeVocab ranks;
  std::vector<std::string> by_rank;
  std::vector<bool> has_rank;
  size_t pos = 0;
  size_t line_no = 0;
  while (pos < tiktoken_file.size()) {
    size_t end = tiktoken_file.find('\n', pos);
    if (end == std::string_view::npos) end = tiktoken_file.size();
    std::string_view line = tiktoken_file.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = "tiktoken file line " + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) return invalid_argument(where + ": expected \"<base64 bytes> <rank>\"");
    std::optional<std::string> bytes = base64_decode(line.substr(0, space));
    if (!bytes || bytes->empty()) return invalid_argument(where + ": the token is not valid base64");
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = 0;
    if (rank_text.empty() || rank_text.size() > 10) return invalid_argument(where + ": the rank is not a number");
    for (char c : rank_text) {
      if (c < '0' || c > '9') return invalid_argument(where + ": the rank is not a number");
      rank = rank * 10 + (c - '0');
    }
    if (rank > INT32_MAX - 1) return invalid_argument(where + ": the rank is too large");
    if (!ranks.emplace(*bytes, static_cast<int32_t>(rank)).second) {
      return invalid_argument(where + ": the token appears twice");
    }
    if (static_cast<size_t>(rank) >= by_rank.size()) {
      by_rank.resize(static_cast<size_t>(rank) + 1);
      has_rank.resize(static_cast<size_t>(rank) + 1, false);
    }
    by_rank[static_cast<size_t>(rank)] = std::move(*bytes);
    has_rank[static_cast<size_t>(rank)] = true;
  }
  if (ranks.empty()) return invalid_argument("the tiktoken file holds no tokens");
  Expected<Regex> regex = Regex::compile(pattern);
  if (!regex) return regex.status().with_context("tiktoken split pattern");
  std::vector<HfAddedToken> specials;
  for (const auto& [content, id] : special_tokens) {
    if (content.empty() || id < 0) return invalid_argument("special token '" + content + "' needs text and an id >= 0");
    HfAddedToken token;
    token.id = id;
    token.content = content;
    token.special = true;
    specials.push_back(std::move(token));
  }
  return std::unique_ptr<Tokenizer>(new TiktokenTokenizer(std::move(ranks), std::move(by_rank), std::move(has_rank),
                                                          std::move(regex).value(), std::move(specials)));
}

}  // namespace kiln::llm
