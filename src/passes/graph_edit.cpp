#include <algorithm>

#include "passes/pass.h"

namespace kiln::passes {

void erase_nodes(ir::Graph& graph, const std::vector<bool>& dead) {
  std::vector<ir::Node> kept;
  kept.reserve(graph.nodes().size());
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (!dead[i]) kept.push_back(std::move(graph.nodes()[i]));
  }
  graph.nodes() = std::move(kept);
}

bool single_reader(const ir::Graph& graph, ir::ValueId id) {
  return graph.consumers(id).size() == 1 &&
         std::find(graph.outputs().begin(), graph.outputs().end(), id) == graph.outputs().end();
}

}  // namespace kiln::passes
