// A MatMul whose second operand is a constant 2-D f32 weight [K, N] gets it stored transposed,
// [N, K], with the node attribute kiln.b_transposed = 1: the CPU kernel multiplies by weight rows
// ([N, K], as the matmul kernels read them) and no longer transposes the weight on every run.
#include "passes/pass.h"

namespace kiln::passes {

Status run_transpose_matmul_weights(ir::Graph& graph, const PassContext& /*ctx*/) {
  for (ir::Node& n : graph.nodes()) {
    if (n.op != "MatMul" || n.inputs.size() < 2 || n.has_attr("kiln.b_transposed")) continue;
    const ir::ValueId b = n.inputs[1];
    if (b == ir::kNoValue || !graph.value(b).is_weight) continue;
    const ir::WeightEntry& w = graph.weight(b);
    if (w.dtype != ir::DType::kF32 || w.shape.size() != 2 || !w.load) continue;
    const int64_t k = w.shape[0], cols = w.shape[1];
    const ir::WeightLoader load = w.load;
    ir::WeightEntry t;
    t.shape = {cols, k};
    t.load = [=]() -> Expected<std::vector<float>> {
      KILN_ASSIGN_OR_RETURN(std::vector<float> v, load());
      std::vector<float> out(v.size());
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * k + r)] = v[static_cast<size_t>(r * cols + c)];
      }
      return out;
    };
    n.inputs[1] = graph.add_weight(graph.value(b).name + ".transposed", std::move(t));
    n.attrs["kiln.b_transposed"] = int64_t{1};
  }
  return Status::ok();
}

}  // namespace kiln::passes
