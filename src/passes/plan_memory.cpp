// Static memory plan: every activation is [tokens or rows, C], so its buffer is planned in
// floats per token and scaled by the runtime's max_tokens. Values whose lifetimes (producer to
// last reader) do not overlap share space; placement is first-fit in definition order.
#include <algorithm>

#include "passes/pass.h"

namespace kiln::passes {
namespace {

struct Interval {
  int64_t begin, end;     // node indices; graph inputs begin at -1, graph outputs end past the last node
  int64_t offset, size;   // floats per token
};

}  // namespace

Status run_plan_memory(ir::Graph& graph, const PassContext& /*ctx*/) {
  // General graphs have activations of any rank whose sizes may be known only at run time; their
  // runner releases each value after its last reader instead (backends/cpu/tensor/tensor_graph_runner.h).
  if (graph.has_tensor_ops()) return Status::ok();
  const auto n_nodes = static_cast<int64_t>(graph.nodes().size());
  std::vector<int64_t> def(graph.values().size(), -2), last(graph.values().size(), -2);
  for (ir::ValueId id : graph.inputs()) def[static_cast<size_t>(id)] = -1;
  for (int64_t i = 0; i < n_nodes; ++i) {
    const ir::Node& node = graph.nodes()[static_cast<size_t>(i)];
    for (ir::ValueId in : node.inputs) last[static_cast<size_t>(in)] = i;
    for (ir::ValueId out : node.outputs) def[static_cast<size_t>(out)] = i;
  }
  for (ir::ValueId id : graph.outputs()) last[static_cast<size_t>(id)] = n_nodes;

  std::vector<Interval> placed;
  int64_t total = 0;
  for (auto& v : graph.values()) v.arena_offset = -1;
  // Definition order: inputs first, then node outputs in node order.
  std::vector<ir::ValueId> order(graph.inputs());
  for (const auto& node : graph.nodes()) order.insert(order.end(), node.outputs.begin(), node.outputs.end());
  for (ir::ValueId id : order) {
    ir::Value& v = graph.value(id);
    if (v.is_weight) continue;
    const int64_t size = v.shape.size() == 2 ? v.shape[1] : 1;
    const int64_t b = def[static_cast<size_t>(id)];
    const int64_t e = std::max(last[static_cast<size_t>(id)], b);  // an unread output still needs a buffer
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const auto& p : placed) {
      if (p.begin <= e && b <= p.end) busy.emplace_back(p.offset, p.offset + p.size);
    }
    // Lowest 16-float-aligned offset clear of every overlapping buffer. Offsets only grow, so the
    // loop ends. Alignment keeps each buffer 64-byte aligned once scaled by max_tokens.
    int64_t offset = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& [lo, hi] : busy) {
        if (offset < hi && lo < offset + size) {
          offset = (hi + 15) / 16 * 16;
          moved = true;
        }
      }
    }
    v.arena_offset = offset;
    placed.push_back({b, e, offset, size});
    total = std::max(total, offset + size);
  }
  graph.set_arena_per_token((total + 15) / 16 * 16);
  return Status::ok();
}

}  // namespace kiln::passes
