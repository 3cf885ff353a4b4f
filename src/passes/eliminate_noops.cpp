// No-op elimination for general graphs: Identity, and Dropout in inference (no training_mode
// input, mask unused), hand their input on unchanged, so their readers read the input directly.
// When the no-op's output is a graph output, the output's name must survive: the producer's
// value takes that name instead, which is possible only when the input comes from a node (a
// graph input or a weight keeps its own name, and the no-op stays).
#include <algorithm>

#include "passes/pass.h"

namespace kiln::passes {

Status run_eliminate_noops(ir::Graph& graph, const PassContext& /*ctx*/) {
  std::vector<bool> dead(graph.nodes().size(), false);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const ir::Node& node = graph.nodes()[i];
    bool noop = node.op == "Identity" && node.inputs.size() == 1;
    if (node.op == "Dropout") {
      const bool training = node.inputs.size() > 2 && node.inputs[2] != ir::kNoValue;
      const bool mask_used = node.outputs.size() > 1 &&
                             (!graph.consumers(node.outputs[1]).empty() ||
                              std::count(graph.outputs().begin(), graph.outputs().end(), node.outputs[1]));
      noop = !training && !mask_used;
    }
    if (!noop) continue;
    const ir::ValueId in = node.inputs[0], out = node.outputs[0];
    const bool is_output = std::count(graph.outputs().begin(), graph.outputs().end(), out) > 0;
    if (is_output) {
      const bool in_is_output = std::count(graph.outputs().begin(), graph.outputs().end(), in) > 0;
      if (graph.producer(in) < 0 || in_is_output) continue;
      graph.value(in).name = graph.value(out).name;
    }
    graph.replace_uses(out, in);
    dead[i] = true;
  }
  erase_nodes(graph, dead);
  return Status::ok();
}

}  // namespace kiln::passes
