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

}  // namespace kiln::passes
