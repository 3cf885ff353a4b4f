#include "llm/structured/compiled_grammar.h"

#include "llm/structured/pushdown_stacks.h"


namespace kiln::llm::structured {

Expected<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(const Grammar& grammar,
                                                                         std::shared_ptr<const TokenVocabulary> vocabulary) {
  auto g = std::make_shared<CompiledGrammar>();
  g->vocabulary_ = std::move(vocabulary);
  g->root_ = grammar.root;
  g->rule_begin_.push_back(0);
  for (const GrammarRule& rule : grammar.rules) {
    for (const auto& alternative : rule.alternatives) {
      g->alt_starts_.push_back(static_cast<int32_t>(g->elements_.size()));
      for (const GrammarItem& item : alternative) {
        GrammarElement e;
        if (item.kind == GrammarItem::Kind::kBytes) {
          e.kind = GrammarElement::Kind::kBytes;
          e.lo = item.lo;
          e.hi = item.hi;
        } else {
          e.kind = GrammarElement::Kind::kRule;
          e.rule = item.rule;
        }
        g->elements_.push_back(e);
      }
      g->elements_.push_back(GrammarElement{});
    }
    g->rule_begin_.push_back(static_cast<int32_t>(g->alt_starts_.size()));
  }
  if (grammar.root < 0 || static_cast<size_t>(grammar.root) >= grammar.rules.size()) {
    return invalid_argument("the grammar has no root rule");
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(g));
}

std::shared_ptr<const ContextMask> CompiledGrammar::context_mask(const std::vector<int32_t>& positions) const {
  const std::string key(reinterpret_cast<const char*>(positions.data()), positions.size() * sizeof(int32_t));
  {
    std::lock_guard lock(mu_);
    auto it = contexts_.find(key);
    if (it != contexts_.end()) return it->second;
  }
  // One walk over the vocabulary trie from a stack of these positions over an unknown rest, on
  // the grammar's lazily built DFA: inside a string nearly every token survives, and nearly every
  // byte repeats a transition some walk already took.
  const bool open = positions.back() != -1;
  std::vector<int32_t> chain(positions.begin(), open ? positions.end() : positions.end() - 1);
  chain.push_back(open ? PushdownStacks::kOpenParent : PushdownStacks::kRootParent);
  std::lock_guard walk_lock(walk_mu_);
  if (walk_states_.size() > kMaxWalkStates) {
    walk_states_.clear();
    walk_ids_.clear();
    walk_transitions_.clear();
  }
  auto& states = walk_states_;
  auto& transitions = walk_transitions_;
  PushdownStacks st(*this);
  const auto intern = [&](std::vector<std::vector<int32_t>> chains, bool popped) {
    std::string id_key(1, popped ? '\1' : '\0');
    for (const auto& c : chains) {
      id_key.append(reinterpret_cast<const char*>(c.data()), c.size() * sizeof(int32_t));
      id_key.append(4, '\xff');  // -1 ends a chain: every chain already ends with a negative bottom
    }
    auto [it, inserted] = walk_ids_.emplace(std::move(id_key), static_cast<int32_t>(states.size()));
    if (inserted) {
      bool has_stacks = false;
      for (const auto& c : chains) has_stacks = has_stacks || c.size() > 1;
      states.push_back(WalkState{std::move(chains), popped, has_stacks});
      transitions.emplace_back();
      transitions.back().fill(-2);
    }
    return it->second;
  };
  const auto transition = [&](int32_t from, uint8_t byte) {
    const int32_t known = transitions[static_cast<size_t>(from)][byte];
    if (known != -2) return known;
    st.start_chains(states[static_cast<size_t>(from)].chains);
    int32_t to = -1;
    if (st.advance(byte)) {
      // A state that may end here (closed contexts only) is a live one without stacks.
      auto chains = st.chains();
      if (st.can_end()) chains.push_back({PushdownStacks::kRootParent});
      to = intern(std::move(chains), st.popped());
    }
    transitions[static_cast<size_t>(from)][byte] = to;
    return to;
  };
  auto mask = std::make_shared<ContextMask>();
  const TokenVocabulary& vocab = *vocabulary_;
  mask->accepted.assign(vocab.mask_words(), 0);
  const auto& trie = vocab.trie();
  const auto& tokens = vocab.trie_tokens();
  const auto add_uncertain = [&](int32_t begin, int32_t end) {
    for (int32_t k = begin; k < end; ++k) mask->uncertain.push_back(tokens[static_cast<size_t>(k)]);
  };
  std::vector<int32_t> at_depth = {intern({chain}, false)};
  std::vector<uint8_t> popped_at(1, 0);  // [d]: a frame at depth 1..d returned below the context
  size_t i = 1;
  while (i < trie.size()) {
    const TokenVocabulary::TrieNode& nd = trie[i];
    const auto d = static_cast<size_t>(nd.depth);
    const int32_t subtree_end = trie[static_cast<size_t>(nd.end) - 1].tokens_end;
    const int32_t to = transition(at_depth[d - 1], nd.byte);
    if (to < 0) {
      if (popped_at[d - 1]) add_uncertain(nd.tokens_begin, subtree_end);
      i = static_cast<size_t>(nd.end);
      continue;
    }
    if (at_depth.size() <= d) {
      at_depth.resize(d + 1);
      popped_at.resize(d + 1);
    }
    at_depth[d] = to;
    const WalkState& ws = states[static_cast<size_t>(to)];
    popped_at[d] = popped_at[d - 1] || ws.popped;
    const bool has_stacks = ws.has_stacks;
    for (int32_t k = nd.tokens_begin; k < nd.tokens_end; ++k) {
      const auto id = static_cast<size_t>(tokens[static_cast<size_t>(k)]);
      mask->accepted[id >> 6] |= uint64_t{1} << (id & 63);
    }
    if (!has_stacks) {
      if (popped_at[d]) add_uncertain(nd.tokens_end, subtree_end);
      i = static_cast<size_t>(nd.end);
      continue;
    }
    ++i;
  }
  std::lock_guard lock(mu_);
  auto [it, inserted] = contexts_.emplace(key, std::move(mask));
  return it->second;
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::find_state_mask(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = states_.find(key);
  return it == states_.end() ? nullptr : it->second;
}

void CompiledGrammar::store_state_mask(const std::string& key, std::shared_ptr<const std::vector<uint64_t>> mask) const {
  std::lock_guard lock(mu_);
  if (states_.size() >= kMaxStateMasks) states_.clear();
  states_.emplace(key, std::move(mask));
}

CompiledGrammar::CacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard lock(mu_);
  return CacheStats{contexts_.size(), states_.size()};
}

}  // namespace kiln::llm::structured
