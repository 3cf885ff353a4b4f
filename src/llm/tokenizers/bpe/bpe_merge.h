// The byte-pair merge loop shared by the Hugging Face BPE model and the tiktoken encoder: a word
// starts as a list of symbols and the lowest-ranked adjacent pair is merged until no pair has a
// rank; among equal ranks the leftmost pair goes first. This is the order both reference
// implementations produce (the Hugging Face library with a priority queue, tiktoken by scanning).
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace kiln::llm {

// One symbol of a word being merged; symbols form a doubly linked list over the vector.
// start/len are byte offsets into the word, id is the vocabulary id.
struct BpeSymbol {
  int32_t id = 0;
  int32_t prev = -1;
  int32_t next = -1;
  uint32_t start = 0;
  uint32_t len = 0;
};

struct BpeMergeTarget {
  int32_t rank = 0;
  int32_t new_id = 0;
};

// Merges `symbols` (linked in order, prev/next set) in place; merged-away symbols end with
// len == 0. lookup(left, right) returns the rank and resulting id of merging two adjacent
// symbols, or nullopt when they do not merge.
template <typename Lookup>
void bpe_merge_all(std::vector<BpeSymbol>& symbols, Lookup&& lookup) {
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto size = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i + 1 < size; ++i) {
    if (std::optional<BpeMergeTarget> t = lookup(symbols[i], symbols[i + 1])) {
      queue.push({t->rank, i, t->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    BpeSymbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const int32_t right_pos = left.next;
    BpeSymbol& right = symbols[right_pos];
    // Entries go stale when a neighbour merged first: check the pair still makes the same token
    // (the Hugging Face library checks only the resulting id, so do we).
    const std::optional<BpeMergeTarget> now = lookup(left, right);
    if (!now || now->new_id != top.new_id) continue;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (std::optional<BpeMergeTarget> t = lookup(symbols[left.prev], left)) {
        queue.push({t->rank, left.prev, t->new_id});
      }
    }
    if (left.next >= 0) {
      if (std::optional<BpeMergeTarget> t = lookup(left, symbols[left.next])) {
        queue.push({t->rank, top.pos, t->new_id});
      }
    }
  }
}

}  // namespace kiln::llm
