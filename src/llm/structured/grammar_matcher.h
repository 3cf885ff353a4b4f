// GrammarMatcher: one output's progress through a CompiledGrammar. It accepts bytes (or a
// token's bytes) incrementally and can roll them back, says whether the output may end here,
// which bytes the grammar forces next (jump-forward), and fills the mask of tokens that may come
// next. One matcher per choice; it shares the compiled grammar (and its caches) with every other
// matcher of that grammar. Not thread-safe; matchers of one grammar run on different threads.
//
// The mask: for each stack of the state, the context mask of its top frames (accepted tokens
// at once; uncertain ones tested by running their bytes on that stack, in trie order so that
// tokens with a common prefix share its work); the result is kept per state in the grammar's
// cache. Tokens without bytes (special ones) are never set: the caller allows its end tokens
// when can_end().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "llm/structured/compiled_grammar.h"
#include "llm/structured/pushdown_stacks.h"

namespace kiln::llm::structured {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // All of `bytes`, or none of them (false).
  bool accept_bytes(std::string_view bytes);
  // A token's bytes; false for a token without bytes or whose bytes the grammar refuses.
  bool accept_token(int32_t token);
  // Takes back the last `n` accepted bytes (n <= num_bytes()).
  void rollback_bytes(size_t n);
  size_t num_bytes() const { return st_.num_frames() - 1; }

  bool can_end() const { return st_.can_end(); }
  // The output may end here and nothing may follow.
  bool is_complete() const { return st_.can_end() && st_.tops().empty(); }
  // The bytes every continuation starts with (at most `limit`), stopping where the output may end.
  std::string forced_bytes(size_t limit = 256);

  // mask: [vocabulary mask words]; bit t set when token t may come next.
  void fill_mask(std::span<uint64_t> mask);

  const CompiledGrammar& grammar() const { return *g_; }

 private:
  std::string state_key() const;

  std::shared_ptr<const CompiledGrammar> g_;
  PushdownStacks st_;
};

}  // namespace kiln::llm::structured
