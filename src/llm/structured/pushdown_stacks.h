// PushdownStacks: the nondeterministic pushdown automaton of a CompiledGrammar, over bytes, with
// a history of states for rollback. A state (a frame) is the set of stacks alive after the
// bytes so far, each stack a node chain in a pool shared by all frames (nodes are appended and
// dropped with the frame that made them). Stacks are kept with a byte range on top: advancing
// by a byte moves each matching top past its range and expands what follows (entering rules,
// returning from finished ones). A reference at the end of an alternative is a tail call: it
// returns straight to the caller's caller, so right recursion (x*) runs in constant depth.
//
// Below the bottom node is either the end of the sentence (kRootParent: reaching it means the
// grammar may end) or, when computing context masks, an unknown rest (kOpenParent: reaching it
// is noted as popped()). Used by GrammarMatcher and by CompiledGrammar's cache walks; one
// thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "llm/structured/compiled_grammar.h"

namespace kiln::llm::structured {

class PushdownStacks {
 public:
  static constexpr int32_t kRootParent = -1;
  static constexpr int32_t kOpenParent = -2;

  struct Node {
    int32_t pos;
    int32_t parent;
  };

  explicit PushdownStacks(const CompiledGrammar& g) : g_(g) {}

  // The first frame: the root rule's alternatives expanded.
  void start_root();
  // The first frame: one stack of `positions` (top first) over `bottom` (kRootParent or kOpenParent).
  void start_chain(std::span<const int32_t> positions, int32_t bottom);
  // The first frame: several stacks, each positions top first and then its bottom (kRootParent
  // or kOpenParent).
  void start_chains(const std::vector<std::vector<int32_t>>& chains);
  // The stacks of the last frame in start_chains' form, sorted.
  std::vector<std::vector<int32_t>> chains() const;
  // A new frame holding only the existing top node `top` (to test tokens against one stack).
  void push_single(int32_t top);

  // A new frame after `byte`. False, with no frame added, when no stack takes the byte and
  // nothing returned past the bottom.
  bool advance(uint8_t byte);
  void pop_frame();
  void pop_to(size_t frames) {
    while (frames_.size() > frames) pop_frame();
  }
  size_t num_frames() const { return frames_.size(); }

  std::span<const int32_t> tops() const {
    const Frame& f = frames_.back();
    return std::span<const int32_t>(tops_).subspan(f.tops_begin);
  }
  bool can_end() const { return frames_.back().accepted; }
  bool popped() const { return frames_.back().popped; }
  const Node& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }

 private:
  struct Frame {
    size_t tops_begin;
    size_t nodes_begin;
    bool accepted;
    bool popped;
  };

  int32_t make_node(int32_t pos, int32_t parent);
  void expand(int32_t pos, int32_t parent, Frame& f);

  const CompiledGrammar& g_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tops_;
  std::vector<Frame> frames_;
};

}  // namespace kiln::llm::structured
