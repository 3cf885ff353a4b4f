// Conv + BatchNormalization folding (inference graphs, as exporters write them): a
// BatchNormalization whose input is a Conv's output read by nothing else, with the convolution's
// weight and bias and the normalisation's four parameters all constant, becomes part of the
// convolution (fold_channel_affine.h). Per output channel m, with s = scale[m] / sqrt(var[m] + epsilon):
//   W'[m, ...] = W[m, ...] * s,   B'[m] = (B[m] - mean[m]) * s + bias[m]   (B = 0 when absent).
// fuse_epilogues folds the same after other folds, and into ConvTranspose too.
#include "passes/fold_channel_affine.h"
#include "passes/pass.h"

namespace kiln::passes {

Status run_fuse_conv_batchnorm(ir::Graph& graph, const PassContext& ctx) {
  std::vector<bool> dead(graph.nodes().size(), false);
  size_t folded = 0;
  for (size_t bi = 0; bi < graph.nodes().size(); ++bi) {
    const ir::Node bn = graph.nodes()[bi];
    if (bn.op != "BatchNormalization" || bn.inputs.size() != 5 || bn.outputs.size() != 1) continue;
    const ir::ValueId x = bn.inputs[0];
    const int64_t ci = graph.producer(x);
    if (ci < 0 || !single_reader(graph, x)) continue;
    ir::Node& conv = graph.nodes()[static_cast<size_t>(ci)];
    if (conv.op != "Conv" || conv.inputs.size() < 2 || conv.inputs.size() > 3) continue;
    const ir::ValueId w = conv.inputs[1];
    if (!graph.value(w).is_weight || graph.weight(w).shape.empty()) continue;
    auto a = batchnorm_affine(graph, bn, conv_output_channels(conv, graph.weight(w).shape));
    if (!a || !fold_channel_affine(graph, conv, bn.name, std::move(a->s), std::move(a->t))) continue;
    conv.outputs[0] = bn.outputs[0];
    dead[bi] = true;
    ++folded;
  }
  erase_nodes(graph, dead);
  if (folded > 0) {
    ctx.note("fuse_conv_batchnorm: folded " + std::to_string(folded) + " BatchNormalization nodes into their convolutions");
  }
  return Status::ok();
}

}  // namespace kiln::passes
