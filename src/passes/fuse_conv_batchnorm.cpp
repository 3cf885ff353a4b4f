// Conv + BatchNormalization folding (inference graphs, as exporters write them): a
// BatchNormalization whose input is a Conv's output read by nothing else, with the convolution's
// weight and bias and the normalisation's four parameters all constant, becomes part of the
// convolution. Per output channel m, with s = scale[m] / sqrt(var[m] + epsilon):
//   W'[m, ...] = W[m, ...] * s,   B'[m] = (B[m] - mean[m]) * s + bias[m]   (B = 0 when absent).
// The folded weights are new weights with composed loaders; the originals are left for
// dead-node elimination.
#include <cmath>

#include "passes/pass.h"

namespace kiln::passes {
namespace {

bool f32_weight(const ir::Graph& graph, ir::ValueId id) {
  return id != ir::kNoValue && graph.value(id).is_weight && graph.weight(id).dtype == ir::DType::kF32;
}

// s[m] = scale[m] / sqrt(var[m] + epsilon) and t[m] = bias[m] - mean[m] * s[m], in double.
struct ChannelAffine {
  std::vector<double> s, t;
};

Expected<ChannelAffine> channel_affine(const ir::WeightLoader& scale, const ir::WeightLoader& bias,
                                       const ir::WeightLoader& mean, const ir::WeightLoader& var, double epsilon) {
  KILN_ASSIGN_OR_RETURN(std::vector<float> sc, scale());
  KILN_ASSIGN_OR_RETURN(std::vector<float> b, bias());
  KILN_ASSIGN_OR_RETURN(std::vector<float> mu, mean());
  KILN_ASSIGN_OR_RETURN(std::vector<float> v, var());
  ChannelAffine a;
  for (size_t m = 0; m < sc.size(); ++m) {
    const double s = sc[m] / std::sqrt(static_cast<double>(v[m]) + epsilon);
    a.s.push_back(s);
    a.t.push_back(b[m] - mu[m] * s);
  }
  return a;
}

}  // namespace

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
    const ir::ValueId b = conv.inputs.size() == 3 ? conv.inputs[2] : ir::kNoValue;
    if (!f32_weight(graph, w) || (b != ir::kNoValue && !f32_weight(graph, b))) continue;
    const ir::WeightEntry& we = graph.weight(w);
    if (we.shape.empty()) continue;
    const int64_t channels = we.shape[0];
    bool params = true;
    for (size_t i = 1; i < 5; ++i) {
      params = params && f32_weight(graph, bn.inputs[i]) && graph.weight(bn.inputs[i]).numel() == channels;
    }
    if (!params || (b != ir::kNoValue && graph.weight(b).numel() != channels)) continue;

    const ir::WeightLoader scale = graph.weight(bn.inputs[1]).load, shift = graph.weight(bn.inputs[2]).load;
    const ir::WeightLoader mean = graph.weight(bn.inputs[3]).load, var = graph.weight(bn.inputs[4]).load;
    const double epsilon = bn.attr_float("epsilon", 1e-5);
    const ir::WeightLoader load_w = we.load;
    const int64_t per_channel = we.numel() / channels;
    ir::WeightEntry new_w;
    new_w.shape = we.shape;
    new_w.load = [=]() -> Expected<std::vector<float>> {
      KILN_ASSIGN_OR_RETURN(ChannelAffine a, channel_affine(scale, shift, mean, var, epsilon));
      KILN_ASSIGN_OR_RETURN(std::vector<float> v, load_w());
      for (int64_t m = 0; m < channels; ++m) {
        float* row = v.data() + m * per_channel;
        for (int64_t j = 0; j < per_channel; ++j) row[j] = static_cast<float>(row[j] * a.s[static_cast<size_t>(m)]);
      }
      return v;
    };
    const ir::WeightLoader load_b = b != ir::kNoValue ? graph.weight(b).load : ir::WeightLoader{};
    ir::WeightEntry new_b;
    new_b.shape = {channels};
    new_b.load = [=]() -> Expected<std::vector<float>> {
      KILN_ASSIGN_OR_RETURN(ChannelAffine a, channel_affine(scale, shift, mean, var, epsilon));
      std::vector<float> out(static_cast<size_t>(channels));
      std::vector<float> old(static_cast<size_t>(channels), 0.0f);
      if (load_b) {
        KILN_ASSIGN_OR_RETURN(old, load_b());
      }
      for (size_t m = 0; m < out.size(); ++m) out[m] = static_cast<float>(old[m] * a.s[m] + a.t[m]);
      return out;
    };
    const std::string base = conv.name + ".folded_" + bn.name;
    const ir::ValueId nw = graph.add_weight(base + ".weight", std::move(new_w));
    const ir::ValueId nb = graph.add_weight(base + ".bias", std::move(new_b));
    conv.inputs.resize(3);
    conv.inputs[1] = nw;
    conv.inputs[2] = nb;
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
