#include <algorithm>
#include <cstring>

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
  return graph.consumers(id).size() == 1 && !is_graph_output(graph, id);
}

bool is_graph_output(const ir::Graph& graph, ir::ValueId id) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), id) != graph.outputs().end();
}

Expected<ir::Tensor> weight_tensor(const ir::WeightEntry& w) {
  ir::Tensor t(w.dtype, w.shape);
  if (w.dtype == ir::DType::kF32) {
    KILN_ASSIGN_OR_RETURN(std::vector<float> v, w.load());
    if (static_cast<int64_t>(v.size()) != t.numel()) return internal_error("weight loaded with the wrong size");
    if (!v.empty()) std::memcpy(t.mutable_bytes(), v.data(), v.size() * sizeof(float));
  } else {
    KILN_ASSIGN_OR_RETURN(std::vector<std::byte> v, w.load_bytes());
    if (v.size() != t.byte_size()) return internal_error("weight loaded with the wrong size");
    if (!v.empty()) std::memcpy(t.mutable_bytes(), v.data(), v.size());
  }
  return t;
}

}  // namespace kiln::passes
