#include "llm/structured/grammar_matcher.h"

#include <algorithm>
#include <cstring>

namespace kiln::llm::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) : g_(std::move(grammar)), st_(*g_) {
  st_.start_root();
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  const size_t start = st_.num_frames();
  for (char c : bytes) {
    if (!st_.advance(static_cast<uint8_t>(c))) {
      st_.pop_to(start);
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::accept_token(int32_t token) {
  if (token < 0 || token >= g_->vocabulary().size()) return false;
  const auto& bytes = g_->vocabulary().bytes(token);
  return bytes && !bytes->empty() && accept_bytes(*bytes);
}

void GrammarMatcher::rollback_bytes(size_t n) { st_.pop_to(st_.num_frames() - std::min(n, num_bytes())); }

std::string GrammarMatcher::forced_bytes(size_t limit) {
  std::string out;
  const size_t start = st_.num_frames();
  while (out.size() < limit && !st_.can_end() && !st_.tops().empty()) {
    const GrammarElement& first = g_->element(st_.node(st_.tops()[0]).pos);
    if (first.lo != first.hi) break;
    bool same = true;
    for (int32_t top : st_.tops()) {
      const GrammarElement& e = g_->element(st_.node(top).pos);
      same = same && e.lo == first.lo && e.hi == first.lo;
    }
    if (!same || !st_.advance(first.lo)) break;
    out += static_cast<char>(first.lo);
  }
  st_.pop_to(start);
  return out;
}

std::string GrammarMatcher::state_key() const {
  std::vector<std::vector<int32_t>> stacks;
  for (int32_t top : st_.tops()) {
    std::vector<int32_t> chain;
    for (int32_t n = top; n >= 0; n = st_.node(n).parent) chain.push_back(st_.node(n).pos);
    stacks.push_back(std::move(chain));
  }
  std::sort(stacks.begin(), stacks.end());
  std::vector<int32_t> flat;
  for (const auto& s : stacks) {
    flat.insert(flat.end(), s.begin(), s.end());
    flat.push_back(-1);
  }
  flat.push_back(st_.can_end() ? 1 : 0);
  return std::string(reinterpret_cast<const char*>(flat.data()), flat.size() * sizeof(int32_t));
}

void GrammarMatcher::fill_mask(std::span<uint64_t> mask) {
  const TokenVocabulary& vocab = g_->vocabulary();
  KILN_CHECK(mask.size() >= vocab.mask_words());
  const std::string key = state_key();
  if (auto cached = g_->find_state_mask(key)) {
    std::memcpy(mask.data(), cached->data(), cached->size() * sizeof(uint64_t));
    return;
  }
  auto out = std::make_shared<std::vector<uint64_t>>(vocab.mask_words(), 0);
  uint64_t* words = out->data();
  const std::vector<int32_t> tops(st_.tops().begin(), st_.tops().end());
  std::vector<int32_t> context;
  for (int32_t top : tops) {
    context.clear();
    int32_t n = top;
    for (int32_t depth = 0; depth < kContextDepth && n >= 0; ++depth, n = st_.node(n).parent) {
      context.push_back(st_.node(n).pos);
    }
    if (n == PushdownStacks::kRootParent) context.push_back(-1);
    const auto cm = g_->context_mask(context);
    for (size_t w = 0; w < out->size(); ++w) words[w] |= cm->accepted[w];
    if (cm->uncertain.empty()) continue;
    // The uncertain tokens on this stack alone, sharing each prefix with the token before.
    const size_t base = st_.num_frames();
    st_.push_single(top);
    std::string_view current;  // the bytes the frames above base + 1 hold
    for (int32_t token : cm->uncertain) {
      const auto id = static_cast<size_t>(token);
      if (words[id >> 6] >> (id & 63) & 1) continue;
      const std::string& s = *vocab.bytes(token);
      size_t common = 0;
      while (common < current.size() && common < s.size() && current[common] == s[common]) ++common;
      st_.pop_to(base + 1 + common);
      size_t j = common;
      while (j < s.size() && st_.advance(static_cast<uint8_t>(s[j]))) ++j;
      current = std::string_view(s).substr(0, j);
      if (j == s.size()) words[id >> 6] |= uint64_t{1} << (id & 63);
    }
    st_.pop_to(base);
  }
  std::memcpy(mask.data(), words, out->size() * sizeof(uint64_t));
  g_->store_state_mask(key, std::move(out));
}

}  // namespace kiln::llm::structured
