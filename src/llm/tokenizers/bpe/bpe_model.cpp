#include "llm/tokenizers/bpe/bpe_model.h"

#include <cstdio>

#include "llm/tokenizers/bpe/bpe_merge.h"
#include "llm/tokenizers/bpe/bpe_text.h"

namespace kiln::llm {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

Expected<std::unique_ptr<BpeModel>> BpeModel::create(BpeVocab vocab,
                                                     const std::vector<std::pair<std::string, std::string>>& merges,
                                                     BpeOptions options) {
  std::unique_ptr<BpeModel> model(new BpeModel());
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0) return invalid_argument("model.vocab: token '" + token + "' has negative id " + std::to_string(id));
    max_id = std::max(max_id, id);
  }
  model->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  model->has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : vocab) {
    model->id_to_token_[static_cast<size_t>(id)] = token;
    model->has_id_[static_cast<size_t>(id)] = true;
  }
  model->vocab_ = std::move(vocab);
  const size_t prefix_len = options.continuing_subword_prefix.size();
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = model->vocab_.find(a);
    if (ia == model->vocab_.end()) {
      return invalid_argument("model.merges[" + std::to_string(rank) + "]: '" + a + "' is not in model.vocab");
    }
    auto ib = model->vocab_.find(b);
    if (ib == model->vocab_.end()) {
      return invalid_argument("model.merges[" + std::to_string(rank) + "]: '" + b + "' is not in model.vocab");
    }
    std::string merged = a;
    if (prefix_len > 0 && b.compare(0, prefix_len, options.continuing_subword_prefix) == 0) {
      merged.append(b, prefix_len, std::string::npos);
    } else {
      merged += b;
    }
    auto im = model->vocab_.find(merged);
    if (im == model->vocab_.end()) {
      return invalid_argument("model.merges[" + std::to_string(rank) + "]: the merged piece '" + merged +
                              "' is not in model.vocab");
    }
    model->merges_[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(rank), im->second};
  }
  if (options.unk_token) {
    auto it = model->vocab_.find(*options.unk_token);
    if (it != model->vocab_.end()) model->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = model->vocab_.find(std::string_view(name));
    model->byte_ids_[b] = it == model->vocab_.end() ? -1 : it->second;
  }
  model->options_ = std::move(options);
  return model;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[static_cast<size_t>(id)]) {
    return std::nullopt;
  }
  return std::string_view(id_to_token_[static_cast<size_t>(id)]);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Initial symbols: one per character (or per byte through byte fallback), then merges.
  std::vector<BpeSymbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, uint32_t start, uint32_t len) {
    BpeSymbol s;
    s.id = id;
    s.start = start;
    s.len = len;
    s.prev = static_cast<int32_t>(symbols.size()) - 1;
    if (!symbols.empty()) symbols.back().next = static_cast<int32_t>(symbols.size());
    symbols.push_back(s);
  };
  // A pending unknown run: (id, start, byte length). The reference emits it only when the next
  // known character arrives (or at the end), also after byte-fallback pieces in between.
  bool has_unk = false;
  BpeSymbol unk;
  std::string piece;
  size_t pos = 0;
  while (pos < word.size()) {
    size_t end = pos + 1;
    while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) ++end;
    const bool is_first = pos == 0;
    const bool is_last = end == word.size();
    const auto start = static_cast<uint32_t>(pos);
    const auto byte_len = static_cast<uint32_t>(end - pos);
    std::string_view ch = word.substr(pos, end - pos);
    std::string_view key = ch;
    if ((!is_first && !options_.continuing_subword_prefix.empty()) || (is_last && !options_.end_of_word_suffix.empty())) {
      piece.clear();
      if (!is_first) piece += options_.continuing_subword_prefix;
      piece += ch;
      if (is_last) piece += options_.end_of_word_suffix;
      key = piece;
    }
    pos = end;
    if (auto it = vocab_.find(key); it != vocab_.end()) {
      if (has_unk) {
        add(unk.id, unk.start, unk.len);
        has_unk = false;
      }
      add(it->second, start, byte_len);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : key) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        uint32_t offset = start;
        for (char c : key) add(byte_ids_[static_cast<unsigned char>(c)], offset++, 1);
        continue;
      }
    }
    if (unk_id_) {
      if (has_unk && options_.fuse_unk) {
        unk.len += byte_len;
      } else {
        if (has_unk) add(unk.id, unk.start, unk.len);
        unk.id = *unk_id_;
        unk.start = start;
        unk.len = byte_len;
        has_unk = true;
      }
    }
  }
  if (has_unk) add(unk.id, unk.start, unk.len);

  bpe_merge_all(symbols, [this](const BpeSymbol& left, const BpeSymbol& right) -> std::optional<BpeMergeTarget> {
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end()) return std::nullopt;
    return BpeMergeTarget{it->second.first, it->second.second};
  });
  for (const BpeSymbol& s : symbols) {
    if (s.len > 0) out.push_back(s.id);
  }
}

}  // namespace kiln::llm
