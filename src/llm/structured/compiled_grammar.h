// CompiledGrammar: a Grammar flattened for the matcher, bound to one TokenVocabulary, with the
// token-mask caches that make a decoding step cheap. Immutable apart from its caches, which are
// thread-safe: one CompiledGrammar is shared (shared_ptr) by every request that uses the same
// schema and every choice of each, each choice with its own GrammarMatcher.
//
// Flat form: every alternative is a run of elements ending in kEnd; a position is an element's
// index. A pushdown stack is a chain of positions: the top one points at a byte range, each
// one below at the rule reference to return after.
//
// The caches (the idea of XGrammar's adaptive token mask cache):
//  - context masks: for the top kContextDepth positions of a stack, which tokens are accepted
//    whatever lies below them (all their bytes matched inside those frames), which are rejected,
//    and which are uncertain (they need to return below); computed by one walk over the
//    vocabulary trie the first time a context is seen, then reused by every step and request;
//  - state masks: the whole mask of a matcher state (every stack, all positions), for states
//    seen again (inside a string, the same state recurs at every character). Bounded; cleared
//    when full.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "llm/structured/grammar.h"
#include "llm/structured/token_vocabulary.h"

namespace kiln::llm::structured {

struct GrammarElement {
  enum class Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = Kind::kEnd;
  uint8_t lo = 0, hi = 0;
  int32_t rule = -1;
};

// How many frames from the top a context mask covers.
inline constexpr int32_t kContextDepth = 3;
// State masks kept per grammar before the cache is cleared.
inline constexpr size_t kMaxStateMasks = 256;

struct ContextMask {
  std::vector<uint64_t> accepted;  // [mask words]
  std::vector<int32_t> uncertain;  // token ids in trie order
};

class CompiledGrammar {
 public:
  static Expected<std::shared_ptr<const CompiledGrammar>> compile(const Grammar& grammar,
                                                                  std::shared_ptr<const TokenVocabulary> vocabulary);

  const GrammarElement& element(int32_t pos) const { return elements_[static_cast<size_t>(pos)]; }
  std::span<const int32_t> alternatives(int32_t rule) const {
    return std::span<const int32_t>(alt_starts_).subspan(static_cast<size_t>(rule_begin_[static_cast<size_t>(rule)]),
                                                         static_cast<size_t>(rule_begin_[static_cast<size_t>(rule) + 1] -
                                                                             rule_begin_[static_cast<size_t>(rule)]));
  }
  int32_t root() const { return root_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  size_t num_elements() const { return elements_.size(); }

  // The context mask of `positions` (top first; a trailing -1 means the stack ends there).
  std::shared_ptr<const ContextMask> context_mask(const std::vector<int32_t>& positions) const;
  std::shared_ptr<const std::vector<uint64_t>> find_state_mask(const std::string& key) const;
  void store_state_mask(const std::string& key, std::shared_ptr<const std::vector<uint64_t>> mask) const;

  struct CacheStats {
    size_t contexts = 0;
    size_t states = 0;
  };
  CacheStats cache_stats() const;

 private:
  std::vector<GrammarElement> elements_;
  std::vector<int32_t> alt_starts_;   // positions of every rule's alternatives
  std::vector<int32_t> rule_begin_;   // [rules + 1] into alt_starts_
  int32_t root_ = 0;
  std::shared_ptr<const TokenVocabulary> vocabulary_;

  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const ContextMask>> contexts_;

  // The automaton as a lazily built DFA, shared by every context walk of this grammar: a state is
  // a set of stacks over their bottoms (and whether the byte that led to it returned below the
  // context), whatever walk met it first. Context walks hold walk_mu_ throughout; cleared when
  // it passes kMaxWalkStates.
  struct WalkState {
    std::vector<std::vector<int32_t>> chains;
    bool popped = false;
    bool has_stacks = false;
  };
  static constexpr size_t kMaxWalkStates = 1 << 16;
  mutable std::mutex walk_mu_;
  mutable std::vector<WalkState> walk_states_;
  mutable std::unordered_map<std::string, int32_t> walk_ids_;            // a state's stacks as bytes
  mutable std::vector<std::array<int32_t, 256>> walk_transitions_;      // -1 dead, -2 not yet known
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> states_;
};

}  // namespace kiln::llm::structured
