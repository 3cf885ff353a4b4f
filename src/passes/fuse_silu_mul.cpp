// SwiGLU fusion: split(x) -> (a, b); silu(a) * b becomes silu_mul(x) when the split halves are
// equal and a, silu(a) and b have no other readers. Saves two passes over [T, intermediate].
#include "passes/pass.h"

namespace kiln::passes {

Status run_fuse_silu_mul(ir::Graph& graph, const PassContext& /*ctx*/) {
  std::vector<bool> dead(graph.nodes().size(), false);
  for (size_t mi = 0; mi < graph.nodes().size(); ++mi) {
    ir::Node& mul = graph.nodes()[mi];
    if (mul.op != "mul") continue;
    for (int side = 0; side < 2; ++side) {
      const ir::ValueId s = mul.inputs[static_cast<size_t>(side)];
      const ir::ValueId b = mul.inputs[static_cast<size_t>(1 - side)];
      const int64_t si = graph.producer(s), bi = graph.producer(b);
      if (si < 0 || bi < 0 || graph.nodes()[static_cast<size_t>(si)].op != "silu") continue;
      const ir::ValueId a = graph.nodes()[static_cast<size_t>(si)].inputs[0];
      const int64_t spi = graph.producer(a);
      if (spi < 0 || spi != bi) continue;
      const ir::Node& split = graph.nodes()[static_cast<size_t>(spi)];
      if (split.op != "split" || split.outputs.size() != 2 || split.outputs[0] != a || split.outputs[1] != b) {
        continue;
      }
      const auto sizes = split.attr_ints("sizes");
      if (sizes.size() != 2 || sizes[0] != sizes[1]) continue;
      if (!single_reader(graph, a) || !single_reader(graph, s) || !single_reader(graph, b)) continue;
      const ir::ValueId x = split.inputs[0];
      dead[static_cast<size_t>(si)] = true;
      dead[static_cast<size_t>(spi)] = true;
      mul.op = "silu_mul";
      mul.inputs = {x};
      break;
    }
  }
  erase_nodes(graph, dead);
  return Status::ok();
}

}  // namespace kiln::passes
