// Sibling matmul fusion: matmuls that read the same activation (q/k/v projections, gate/up
// projections) become one matmul over row-concatenated weights followed by a split whose
// outputs are the original values, so consumers are untouched. One wide product streams the
// activation once and gives the kernels more columns to divide among threads.
#include <map>

#include "passes/pass.h"

namespace kiln::passes {
namespace {

ir::WeightLoader concat_rows(std::vector<ir::WeightLoader> loaders) {
  return [loaders = std::move(loaders)]() -> Expected<std::vector<float>> {
    std::vector<float> out;
    for (const auto& load : loaders) {
      KILN_ASSIGN_OR_RETURN(std::vector<float> part, load());
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  };
}

bool fusable(const ir::Graph& graph, const ir::Node& node) {
  return node.op == "matmul" && graph.value(node.inputs[1]).is_weight &&
         (node.inputs.size() == 2 || graph.value(node.inputs[2]).is_weight);
}

}  // namespace

Status run_fuse_sibling_matmuls(ir::Graph& graph, const PassContext& /*ctx*/) {
  // Group by (input activation, has bias), in node order.
  std::map<std::pair<ir::ValueId, bool>, std::vector<size_t>> groups;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const ir::Node& node = graph.nodes()[i];
    if (fusable(graph, node)) groups[{node.inputs[0], node.inputs.size() == 3}].push_back(i);
  }
  std::vector<bool> dead(graph.nodes().size(), false);
  std::map<size_t, std::vector<ir::Node>> insert_at;  // replacement nodes placed at the first sibling
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    const bool has_bias = key.second;
    std::vector<ir::WeightLoader> w_loads, b_loads;
    std::vector<int64_t> sizes;
    std::string name, weight_name;
    int64_t k = 0;
    for (size_t idx : members) {
      const ir::Node& node = graph.nodes()[idx];
      const ir::WeightEntry& w = graph.weight(node.inputs[1]);
      w_loads.push_back(w.load);
      sizes.push_back(w.rows());
      k = w.cols();
      if (has_bias) b_loads.push_back(graph.weight(node.inputs[2]).load);
      name += (name.empty() ? "" : "+") + node.name;
      weight_name += (weight_name.empty() ? "" : "+") + graph.value(node.inputs[1]).name;
      dead[idx] = true;
    }
    int64_t n = 0;
    for (int64_t s : sizes) n += s;
    ir::WeightEntry fused_w;
    fused_w.shape = {n, k};
    fused_w.load = concat_rows(std::move(w_loads));
    std::vector<ir::ValueId> inputs = {key.first, graph.add_weight(weight_name, std::move(fused_w))};
    if (has_bias) {
      ir::WeightEntry fused_b;
      fused_b.shape = {n};
      fused_b.load = concat_rows(std::move(b_loads));
      inputs.push_back(graph.add_weight(weight_name + ".bias", std::move(fused_b)));
    }
    const int64_t m = graph.value(key.first).shape[0];
    ir::ValueId fused_out = graph.add_value(name, ir::DType::kF32, {m, n});
    ir::Node matmul;
    matmul.op = "matmul";
    matmul.name = name;
    matmul.inputs = inputs;
    matmul.outputs = {fused_out};
    ir::Node split;
    split.op = "split";
    split.name = name + ".split";
    split.inputs = {fused_out};
    split.attrs["sizes"] = sizes;
    for (size_t idx : members) split.outputs.push_back(graph.nodes()[idx].outputs[0]);
    insert_at[members.front()] = {std::move(matmul), std::move(split)};
  }
  if (insert_at.empty()) return Status::ok();
  std::vector<ir::Node> rebuilt;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (auto it = insert_at.find(i); it != insert_at.end()) {
      for (auto& n : it->second) rebuilt.push_back(std::move(n));
    }
    if (!dead[i]) rebuilt.push_back(std::move(graph.nodes()[i]));
  }
  graph.nodes() = std::move(rebuilt);
  graph.prune_weights();
  return Status::ok();
}

}  // namespace kiln::passes
