#include "llm/structured/pushdown_stacks.h"

#include <algorithm>

namespace kiln::llm::structured {

int32_t PushdownStacks::make_node(int32_t pos, int32_t parent) {
  // Nodes made in this frame are few; sharing equal ones keeps equal stacks one stack.
  for (size_t i = frames_.empty() ? 0 : frames_.back().nodes_begin; i < nodes_.size(); ++i) {
    if (nodes_[i].pos == pos && nodes_[i].parent == parent) return static_cast<int32_t>(i);
  }
  nodes_.push_back(Node{pos, parent});
  return static_cast<int32_t>(nodes_.size() - 1);
}

void PushdownStacks::expand(int32_t pos, int32_t parent, Frame& f) {
  const GrammarElement& e = g_.element(pos);
  switch (e.kind) {
    case GrammarElement::Kind::kBytes: {
      const int32_t top = make_node(pos, parent);
      for (size_t i = f.tops_begin; i < tops_.size(); ++i) {
        if (tops_[i] == top) return;
      }
      tops_.push_back(top);
      return;
    }
    case GrammarElement::Kind::kEnd:
      if (parent == kRootParent) {
        f.accepted = true;
      } else if (parent == kOpenParent) {
        f.popped = true;
      } else {
        const Node p = nodes_[static_cast<size_t>(parent)];
        expand(p.pos + 1, p.parent, f);
      }
      return;
    case GrammarElement::Kind::kRule: {
      const bool tail = g_.element(pos + 1).kind == GrammarElement::Kind::kEnd;
      const int32_t callee_parent = tail ? parent : make_node(pos, parent);
      for (int32_t start : g_.alternatives(e.rule)) expand(start, callee_parent, f);
      return;
    }
  }
}

void PushdownStacks::start_root() {
  nodes_.clear();
  tops_.clear();
  frames_.clear();
  frames_.push_back(Frame{0, 0, false, false});
  Frame f = frames_.back();
  for (int32_t start : g_.alternatives(g_.root())) expand(start, kRootParent, f);
  frames_.back() = f;
}

void PushdownStacks::start_chain(std::span<const int32_t> positions, int32_t bottom) {
  nodes_.clear();
  tops_.clear();
  frames_.clear();
  frames_.push_back(Frame{0, 0, false, false});
  int32_t parent = bottom;
  for (size_t i = positions.size(); i-- > 1;) parent = make_node(positions[i], parent);
  Frame f = frames_.back();
  f.nodes_begin = nodes_.size();
  tops_.push_back(make_node(positions[0], parent));
  frames_.back() = f;
}

void PushdownStacks::start_chains(const std::vector<std::vector<int32_t>>& chains) {
  nodes_.clear();
  tops_.clear();
  frames_.clear();
  frames_.push_back(Frame{0, 0, false, false});
  for (const std::vector<int32_t>& chain : chains) {
    if (chain.size() < 2) continue;  // a mark that the output may end, no stack
    int32_t parent = chain.back();
    for (size_t i = chain.size() - 1; i-- > 1;) parent = make_node(chain[i], parent);
    const int32_t top = make_node(chain[0], parent);
    if (std::find(tops_.begin(), tops_.end(), top) == tops_.end()) tops_.push_back(top);
  }
}

std::vector<std::vector<int32_t>> PushdownStacks::chains() const {
  std::vector<std::vector<int32_t>> out;
  for (int32_t top : tops()) {
    std::vector<int32_t> chain;
    int32_t n = top;
    for (; n >= 0; n = nodes_[static_cast<size_t>(n)].parent) chain.push_back(nodes_[static_cast<size_t>(n)].pos);
    chain.push_back(n);
    out.push_back(std::move(chain));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void PushdownStacks::push_single(int32_t top) {
  frames_.push_back(Frame{tops_.size(), nodes_.size(), false, false});
  tops_.push_back(top);
}

bool PushdownStacks::advance(uint8_t byte) {
  const Frame& prev = frames_.back();
  const size_t prev_begin = prev.tops_begin, prev_end = tops_.size();
  frames_.push_back(Frame{prev_end, nodes_.size(), false, false});
  Frame f = frames_.back();
  for (size_t i = prev_begin; i < prev_end; ++i) {
    const Node n = nodes_[static_cast<size_t>(tops_[i])];
    const GrammarElement& e = g_.element(n.pos);
    if (byte >= e.lo && byte <= e.hi) expand(n.pos + 1, n.parent, f);
  }
  frames_.back() = f;
  if (tops_.size() == f.tops_begin && !f.accepted && !f.popped) {
    pop_frame();
    return false;
  }
  return true;
}

void PushdownStacks::pop_frame() {
  const Frame f = frames_.back();
  frames_.pop_back();
  tops_.resize(f.tops_begin);
  nodes_.resize(f.nodes_begin);
}

}  // namespace kiln::llm::structured
