// A MatMul whose weight transpose_matmul_weights stored as [N, K] rows (and quantize_int8 left in
// f32) gets it packed for the CPU's register tiles, as ir/packed_weight.h lays it out: shape
// [ceil(N / 32), K, 32], the node attribute kiln.b_packed = N. The kernel then reads each panel
// straight through, with no transposition or conversion at run time.
#include "ir/packed_weight.h"
#include "passes/pass.h"

namespace kiln::passes {

Status run_pack_matmul_weights(ir::Graph& graph, const PassContext& /*ctx*/) {
  bool packed = false;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const ir::Node& n = graph.nodes()[i];
    if (n.op != "MatMul" || n.inputs.size() < 2 || n.attr_int("kiln.b_transposed", 0) == 0) continue;
    const ir::ValueId b = n.inputs[1];
    const ir::WeightEntry& w = graph.weight(b);
    if (w.dtype != ir::DType::kF32 || w.shape.size() != 2 || !w.load) continue;
    const int64_t cols = w.shape[0], k = w.shape[1];
    const ir::WeightLoader load = w.load;
    ir::WeightEntry p;
    p.shape = {ir::packed_panels(cols), k, ir::kPackedPanel};
    p.load = [=]() -> Expected<std::vector<float>> {
      KILN_ASSIGN_OR_RETURN(std::vector<float> rows, load());
      std::vector<float> out(static_cast<size_t>(ir::packed_panels(cols) * k * ir::kPackedPanel));
      ir::pack_weight_rows(rows.data(), cols, k, out.data());
      return out;
    };
    const ir::ValueId id = graph.add_weight(graph.value(b).name + ".packed", std::move(p));
    ir::Node& node = graph.nodes()[i];  // add_weight may grow the value table, not the nodes
    node.inputs[1] = id;
    node.attrs.erase("kiln.b_transposed");
    node.attrs["kiln.b_packed"] = cols;
    packed = true;
  }
  if (packed) graph.prune_weights();
  return Status::ok();
}

}  // namespace kiln::passes
