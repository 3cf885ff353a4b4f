#include "llm/structured/token_vocabulary.h"

#include <algorithm>
#include <cctype>
#include <numeric>

#include "llm/tokenizers/bpe/bpe_text.h"

namespace kiln::llm::structured {
namespace {

std::optional<uint8_t> vocabulary_fallback_byte(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return std::nullopt;
  unsigned v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char h = piece[i];
    if (!std::isxdigit(static_cast<unsigned char>(h))) return std::nullopt;
    v = v * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
  }
  return static_cast<uint8_t>(v);
}

std::optional<std::string> vocabulary_byte_level(const std::string& piece) {
  std::string out;
  for (size_t pos = 0; pos < piece.size();) {
    char32_t cp = 0;
    const int n = utf8_decode(piece, pos, &cp);
    if (n <= 0) return std::nullopt;
    auto b = byte_level_byte(cp);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
    pos += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::optional<std::string>> token_bytes) : bytes_(std::move(token_bytes)) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (bytes_[i] && !bytes_[i]->empty()) order.push_back(static_cast<int32_t>(i));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const std::string& x = *bytes_[static_cast<size_t>(a)];
    const std::string& y = *bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  trie_.push_back(TrieNode{});
  std::vector<int32_t> path = {0};  // node of each depth on the current path
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = *bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    if (prev) {
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    }
    while (path.size() > common + 1) {
      trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(s[d]);
      node.depth = static_cast<int32_t>(d + 1);
      node.tokens_begin = node.tokens_end = static_cast<int32_t>(trie_tokens_.size());
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(node);
    }
    TrieNode& last = trie_[static_cast<size_t>(path.back())];
    if (last.tokens_begin == last.tokens_end) last.tokens_begin = last.tokens_end = static_cast<int32_t>(trie_tokens_.size());
    trie_tokens_.push_back(id);
    last.tokens_end = static_cast<int32_t>(trie_tokens_.size());
    prev = &s;
  }
  while (!path.empty()) {
    trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer) {
  const auto n = static_cast<int32_t>(tokenizer.vocab_size());
  std::vector<std::optional<std::string>> bytes(static_cast<size_t>(n));
  bool byte_level = false;
  if (auto space = tokenizer.token_to_id("\xC4\xA0")) {  // "Ġ"
    const std::vector<int32_t> one = {*space};
    auto text = tokenizer.decode(one, false);
    byte_level = text && *text == " ";
  }
  // An anchor token before each token shows what it adds mid-text.
  std::optional<int32_t> anchor;
  std::string anchor_text;
  if (auto ids = tokenizer.encode("a", false); ids && ids->size() == 1) {
    anchor = (*ids)[0];
    if (auto t = tokenizer.decode(*ids, false)) anchor_text = *t;
  }
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_special(id)) continue;
    auto piece = tokenizer.id_to_token(id);
    if (!piece) continue;
    if (auto b = vocabulary_fallback_byte(*piece)) {
      bytes[static_cast<size_t>(id)] = std::string(1, static_cast<char>(*b));
      continue;
    }
    std::optional<std::string> mid_text;
    if (anchor) {
      const std::vector<int32_t> pair = {*anchor, id};
      auto t = tokenizer.decode(pair, false);
      if (t && t->compare(0, anchor_text.size(), anchor_text) == 0) mid_text = t->substr(anchor_text.size());
    }
    if (byte_level) {
      auto b = vocabulary_byte_level(*piece);
      // Added tokens are stored as plain text: they decode to something else than their map.
      if (b && (!utf8_is_valid(*b) || !mid_text || *mid_text == *b)) {
        bytes[static_cast<size_t>(id)] = std::move(*b);
        continue;
      }
    }
    if (mid_text && utf8_is_valid(*mid_text) && mid_text->find("\xEF\xBF\xBD") == std::string::npos) {
      bytes[static_cast<size_t>(id)] = std::move(*mid_text);
    }
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes));
}

}  // namespace kiln::llm::structured
