// Dead-node elimination: nodes none of whose outputs reach a graph output are removed, then
// weights nothing reads any more.
#include <set>

#include "passes/pass.h"

namespace kiln::passes {

Status run_eliminate_dead_nodes(ir::Graph& graph, const PassContext& /*ctx*/) {
  std::set<ir::ValueId> live(graph.outputs().begin(), graph.outputs().end());
  std::vector<bool> dead(graph.nodes().size(), true);
  for (size_t i = graph.nodes().size(); i-- > 0;) {
    const ir::Node& node = graph.nodes()[i];
    // attention writes the KV cache as a side effect, but its output is still needed for that
    // cache to matter, so plain liveness is right for every op in the set.
    for (ir::ValueId out : node.outputs) {
      if (live.count(out)) dead[i] = false;
    }
    if (!dead[i]) live.insert(node.inputs.begin(), node.inputs.end());
  }
  erase_nodes(graph, dead);
  graph.prune_weights();
  return Status::ok();
}

}  // namespace kiln::passes
