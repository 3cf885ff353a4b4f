// TokenVocabulary: every token of a model's vocabulary as the bytes it adds to the text, and a
// trie over those bytes, for the token masks of grammar_matcher.h. Built once per served model
// (lazily, at the first constrained request) and shared, read only, by every compiled grammar.
//
// Bytes of a token: byte-fallback pieces <0xHH> are that byte; in a byte-level BPE vocabulary
// (GPT-2's byte-to-character map, detected by "Ġ" decoding to a space) each character of the
// piece maps back to its byte, so tokens that hold part of a UTF-8 character keep their real
// bytes; any other token is what it adds when decoded after a plain token (SentencePiece's "▁"
// becomes the space it is mid-text). Special tokens, and tokens whose bytes cannot be known
// exactly, have none: a constraint never allows them (the end-of-sequence tokens are allowed
// by the caller when the grammar may end).
//
// The trie: nodes in preorder, node 0 the root; each node is one byte at a depth, `end` is one
// past its subtree, and the tokens whose bytes end there are trie_tokens()[tokens_begin, tokens_end).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llm/tokenizers/tokenizer.h"

namespace kiln::llm::structured {

class TokenVocabulary {
 public:
  struct TrieNode {
    uint8_t byte = 0;
    int32_t depth = 0;
    int32_t end = 0;
    int32_t tokens_begin = 0;
    int32_t tokens_end = 0;
  };

  // token_bytes[id]: the token's bytes, or nothing for a token a constraint never allows.
  explicit TokenVocabulary(std::vector<std::optional<std::string>> token_bytes);
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::optional<std::string>& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  // Mask words: bit (id % 64) of word id / 64.
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }

 private:
  std::vector<std::optional<std::string>> bytes_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
};

}  // namespace kiln::llm::structured
