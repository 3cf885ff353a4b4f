#include "passes/pattern.h"

#include <cmath>
#include <cstring>

#include "passes/pass.h"

namespace kiln::passes {

std::optional<std::vector<float>> f32_constant(const ir::Graph& graph, ir::ValueId id) {
  if (id == ir::kNoValue || !graph.value(id).is_weight) return std::nullopt;
  const ir::WeightEntry& w = graph.weight(id);
  if (w.dtype != ir::DType::kF32 || !w.load) return std::nullopt;
  auto v = w.load();
  if (!v.has_value() || static_cast<int64_t>(v->size()) != w.numel()) return std::nullopt;
  return std::move(*v);
}

std::optional<double> scalar_constant(const ir::Graph& graph, ir::ValueId id) {
  if (id == ir::kNoValue || !graph.value(id).is_weight || graph.weight(id).numel() != 1) return std::nullopt;
  auto v = f32_constant(graph, id);
  if (!v) return std::nullopt;
  return (*v)[0];
}

std::optional<std::vector<int64_t>> i64_constant(const ir::Graph& graph, ir::ValueId id) {
  if (id == ir::kNoValue || !graph.value(id).is_weight) return std::nullopt;
  const ir::WeightEntry& w = graph.weight(id);
  if (w.dtype != ir::DType::kI64 || !w.load_bytes) return std::nullopt;
  auto bytes = w.load_bytes();
  if (!bytes.has_value() || bytes->size() != static_cast<size_t>(w.numel()) * sizeof(int64_t)) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(w.numel()));
  std::memcpy(out.data(), bytes->data(), bytes->size());
  return out;
}

bool is_scalar(const ir::Graph& graph, ir::ValueId id, double want, double tolerance) {
  const auto v = scalar_constant(graph, id);
  return v && std::fabs(*v - want) <= tolerance * std::fabs(want);
}

int64_t only_reader(const ir::Graph& graph, ir::ValueId id) {
  return single_reader(graph, id) ? static_cast<int64_t>(graph.consumers(id)[0]) : -1;
}

int64_t sole_reader(const ir::Graph& graph, ir::ValueId id, const char* op) {
  const int64_t i = only_reader(graph, id);
  return i >= 0 && graph.nodes()[static_cast<size_t>(i)].op == op ? i : -1;
}

ir::ValueId other_input(const ir::Node& node, ir::ValueId id) {
  if (node.inputs.size() != 2) return ir::kNoValue;
  if (node.inputs[0] == id && node.inputs[1] != id) return node.inputs[1];
  if (node.inputs[1] == id && node.inputs[0] != id) return node.inputs[0];
  return ir::kNoValue;
}

void kill_node(ir::Graph& graph, size_t index, std::vector<bool>& dead) {
  ir::Node& n = graph.nodes()[index];
  n.inputs.clear();
  n.outputs.clear();
  dead[index] = true;
}

}  // namespace kiln::passes
