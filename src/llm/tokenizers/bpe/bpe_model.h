// BpeModel: the Hugging Face tokenizers "BPE" model. Turns one pre-tokenized word into ids:
// characters (with the optional continuing-subword prefix / end-of-word suffix) are looked up,
// unknown characters become byte-fallback tokens <0xXX> or the unk token (fused when fuse_unk),
// then merges are applied by rank. Covers byte-level vocabularies (GPT-2, Llama-3, Qwen) and
// SentencePiece-style ones (Llama-2, Mistral). Results for short words are cached.
// Immutable after create() except for the internal cache, which is guarded; safe to share.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kiln::llm {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // empty: none
  std::string end_of_word_suffix;         // empty: none
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;  // a word that is itself in the vocabulary is not merged
};

// Transparent hash so maps keyed by std::string can be searched with a string_view.
struct BpeStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BpeVocab = std::unordered_map<std::string, int32_t, BpeStringHash, std::equal_to<>>;

class BpeModel {
 public:
  // merges: pairs of vocabulary pieces, highest priority first. Fails with a message naming the
  // piece when a merge refers to a piece (or produces one) that is not in the vocabulary.
  static Expected<std::unique_ptr<BpeModel>> create(BpeVocab vocab,
                                                    const std::vector<std::pair<std::string, std::string>>& merges,
                                                    BpeOptions options);

  // Appends the ids of `word` (valid UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Empty optional for ids that are not in the vocabulary.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // Largest id + 1.
  int64_t id_limit() const { return static_cast<int64_t>(id_to_token_.size()); }
  const BpeOptions& options() const { return options_; }

 private:
  BpeModel() = default;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  BpeVocab vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, new id)
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256] = {};  // <0xXX> ids, -1 when missing (only with byte_fallback)

  static constexpr size_t kCacheCapacity = 20000;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, BpeStringHash, std::equal_to<>> cache_;
};

}  // namespace kiln::llm
