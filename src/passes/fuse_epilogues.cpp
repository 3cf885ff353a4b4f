// Pointwise work after a Conv, ConvTranspose, Gemm or MatMul moves into it (inference graphs), so that the
// product's kernel finishes each output while it is in cache instead of separate nodes each
// making a pass over it. Along the chain of single readers after the product, in this order:
//   1. Conv and ConvTranspose: a Mul and/or Add by a constant per output channel (or a scalar),
//      and BatchNormalization with constant parameters, fold into the weights and bias (as
//      fuse_conv_batchnorm does for a BatchNormalization right after a Conv):
//        W'[m] = W[m] * s[m],  B'[m] = B[m] * s[m] + t[m]
//      MatMul with a constant [K, N] weight: an Add of a constant [N] becomes its bias input.
//   2. One activation (ir/epilogue.h): Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish,
//      Gelu (either form), Clip with constant bounds, or Swish, written y * Sigmoid(y) or
//      y * Sigmoid(y * c).
//   3. Mul, Div, Add and Sub by scalar constants: the epilogue's scale and shift.
// The absorbed nodes are removed; the product takes the last one's output.
#include <cmath>
#include <limits>

#include "ir/epilogue.h"
#include "passes/fold_channel_affine.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::ValueId;

// A constant that broadcasts against a Conv output [N, M, spatial...] without changing its shape and
// is constant per output channel: a scalar, or M values on the axis aligned with M ([M, 1, 1] or
// [1, M, 1, 1] for a 2-D convolution). Returns one value per channel.
std::optional<std::vector<double>> per_channel(const Graph& g, ValueId c, int64_t channels, size_t spatial) {
  const auto v = f32_constant(g, c);
  if (!v) return std::nullopt;
  const std::vector<int64_t>& shape = g.weight(c).shape;
  if (shape.size() > spatial + 2) return std::nullopt;
  if (v->size() == 1) return std::vector<double>(static_cast<size_t>(channels), (*v)[0]);
  const int64_t at = static_cast<int64_t>(shape.size()) - 1 - static_cast<int64_t>(spatial);
  if (at < 0) return std::nullopt;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != (static_cast<int64_t>(i) == at ? channels : 1)) return std::nullopt;
  }
  return std::vector<double>(v->begin(), v->end());
}

// Node `op` reading `y` as a per-channel affine of Conv/ConvTranspose `conv`'s output, folded
// into its weights: Mul or Add by a per-channel constant, or BatchNormalization with constant
// parameters.
bool fold_conv_affine(Graph& g, Node& conv, const Node& op, ValueId y) {
  const ValueId w = conv.inputs[1];
  if (!g.value(w).is_weight || g.weight(w).shape.size() < 3) return false;
  const int64_t channels = conv_output_channels(conv, g.weight(w).shape);
  const size_t spatial = g.weight(w).shape.size() - 2;
  if (op.op == "BatchNormalization") {
    if (op.inputs[0] != y) return false;
    auto a = batchnorm_affine(g, op, channels);
    return a && fold_channel_affine(g, conv, op.name, std::move(a->s), std::move(a->t));
  }
  const ValueId c = other_input(op, y);
  if (c == ir::kNoValue || (op.op != "Mul" && op.op != "Add")) return false;
  auto k = per_channel(g, c, channels, spatial);
  if (!k) return false;
  if (op.op == "Mul") return fold_channel_affine(g, conv, op.name, std::move(*k), {});
  return fold_channel_affine(g, conv, op.name, {}, std::move(*k));
}

// MatMul(a, W [K, N] constant) + b [N] constant: b becomes the MatMul's third input.
bool fold_matmul_bias(Graph& g, Node& mm, const Node& add, ValueId y) {
  if (add.op != "Add" || mm.inputs.size() != 2) return false;
  const ValueId w = mm.inputs[1], b = other_input(add, y);
  if (b == ir::kNoValue || !g.value(w).is_weight || !g.value(b).is_weight) return false;
  const auto& ws = g.weight(w).shape;
  const auto& bs = g.weight(b).shape;
  if (ws.size() != 2 || bs.size() != 1 || bs[0] != ws[1] || g.weight(b).dtype != ir::DType::kF32) return false;
  mm.inputs.push_back(b);
  return true;
}

// The activation of node `n` reading `y`, with its parameters, or nullopt.
std::optional<ir::Epilogue> activation_of(const Graph& g, const Node& n) {
  const auto a = ir::activation_from_name(n.op);
  if (!a || *a == ir::Activation::kSwish || n.inputs.empty()) return std::nullopt;
  ir::Epilogue e;
  e.activation = *a;
  switch (*a) {
    case ir::Activation::kLeakyRelu: e.alpha = n.attr_float("alpha", 0.01); break;
    case ir::Activation::kHardSigmoid:
      e.alpha = n.attr_float("alpha", 0.2);
      e.beta = n.attr_float("beta", 0.5);
      break;
    case ir::Activation::kGelu:
      if (n.attr_str("approximate", "none") == "tanh") e.activation = ir::Activation::kGeluTanh;
      break;
    case ir::Activation::kClip: {
      e.alpha = -std::numeric_limits<double>::infinity();
      e.beta = std::numeric_limits<double>::infinity();
      if (n.inputs.size() > 1 && n.inputs[1] != ir::kNoValue) {
        const auto lo = scalar_constant(g, n.inputs[1]);
        if (!lo) return std::nullopt;
        e.alpha = *lo;
      }
      if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) {
        const auto hi = scalar_constant(g, n.inputs[2]);
        if (!hi) return std::nullopt;
        e.beta = *hi;
      }
      break;
    }
    default: break;
  }
  return e;
}

// y * Sigmoid(y) or y * Sigmoid(y * c): y has exactly these readers. Returns the Mul's index and
// sets `beta` (c, or 1) and `absorbed` (the nodes before the Mul).
int64_t match_swish(const Graph& g, ValueId y, double& beta, std::vector<int64_t>& absorbed) {
  const std::vector<size_t> readers = g.consumers(y);
  if (readers.size() != 2 || is_graph_output(g, y)) return -1;
  for (int first = 0; first < 2; ++first) {
    const size_t si = readers[static_cast<size_t>(first)], mi = readers[static_cast<size_t>(1 - first)];
    const Node& m = g.nodes()[mi];
    if (m.op != "Mul" || other_input(m, y) == ir::kNoValue) continue;
    const ValueId s = other_input(m, y);
    const Node& pre = g.nodes()[si];
    if (pre.op == "Sigmoid" && pre.outputs[0] == s && single_reader(g, s)) {
      beta = 1.0;
      absorbed = {static_cast<int64_t>(si)};
      return static_cast<int64_t>(mi);
    }
    if (pre.op == "Mul" && single_reader(g, pre.outputs[0])) {
      const auto c = scalar_constant(g, other_input(pre, y));
      const int64_t sg = sole_reader(g, pre.outputs[0], "Sigmoid");
      if (!c || sg < 0 || g.nodes()[static_cast<size_t>(sg)].outputs[0] != s || !single_reader(g, s)) continue;
      beta = *c;
      absorbed = {static_cast<int64_t>(si), sg};
      return static_cast<int64_t>(mi);
    }
  }
  return -1;
}

// Absorbs what follows product node `pi`; returns how many nodes it absorbed.
size_t fuse_after(Graph& g, size_t pi, std::vector<bool>& dead) {
  size_t absorbed = 0;
  const std::string op = g.nodes()[pi].op;
  ir::Epilogue e = ir::node_epilogue(g.nodes()[pi]);
  bool weights_open = e.empty() && (op == "Conv" || op == "ConvTranspose" || op == "MatMul");  // step 1 still possible
  bool activation_open = e.empty();
  while (true) {
    Node& p = g.nodes()[pi];
    const ValueId y = p.outputs[0];
    // Swish reads y twice, so it is matched before the single-reader steps.
    if (activation_open) {
      double beta = 1.0;
      std::vector<int64_t> pre;
      const int64_t mi = match_swish(g, y, beta, pre);
      if (mi >= 0) {
        e.activation = ir::Activation::kSwish;
        e.alpha = beta;
        p.outputs[0] = g.nodes()[static_cast<size_t>(mi)].outputs[0];
        for (int64_t i : pre) kill_node(g, static_cast<size_t>(i), dead);
        kill_node(g, static_cast<size_t>(mi), dead);
        absorbed += 1 + pre.size();
        weights_open = activation_open = false;
        continue;
      }
    }
    const int64_t ni = only_reader(g, y);
    if (ni < 0 || g.nodes()[static_cast<size_t>(ni)].outputs.size() != 1) break;
    const Node& n = g.nodes()[static_cast<size_t>(ni)];
    bool took = false;
    if (weights_open && (op == "Conv" || op == "ConvTranspose")) {
      took = fold_conv_affine(g, p, n, y);
    } else if (weights_open && op == "MatMul") {
      took = fold_matmul_bias(g, p, n, y);
      weights_open = !took;
    }
    if (!took && activation_open) {
      if (const auto a = activation_of(g, n); a && n.inputs[0] == y) {
        e.activation = a->activation;
        e.alpha = a->alpha;
        e.beta = a->beta;
        took = true;
        weights_open = activation_open = false;
      }
    }
    if (!took && (n.op == "Mul" || n.op == "Div" || n.op == "Add" || n.op == "Sub")) {
      const ValueId c = other_input(n, y);
      const auto v = scalar_constant(g, c);
      const bool y_first = n.inputs[0] == y;
      if (v && (y_first || n.op == "Mul" || n.op == "Add")) {
        if (n.op == "Mul") {
          e.scale *= *v;
          e.shift *= *v;
        } else if (n.op == "Div" && *v != 0.0) {
          e.scale /= *v;
          e.shift /= *v;
        } else if (n.op == "Add") {
          e.shift += *v;
        } else if (n.op == "Sub") {
          e.shift -= *v;
        }
        took = n.op != "Div" || *v != 0.0;
        if (took) weights_open = activation_open = false;
      }
    }
    if (!took) break;
    p.outputs[0] = n.outputs[0];
    kill_node(g, static_cast<size_t>(ni), dead);
    ++absorbed;
  }
  set_node_epilogue(g.nodes()[pi], e);
  return absorbed;
}

}  // namespace

Status run_fuse_epilogues(ir::Graph& graph, const PassContext& ctx) {
  std::vector<bool> dead(graph.nodes().size(), false);
  size_t products = 0, absorbed = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const std::string& op = graph.nodes()[i].op;
    if (dead[i] || (op != "Conv" && op != "ConvTranspose" && op != "Gemm" && op != "MatMul") || graph.nodes()[i].outputs.size() != 1) continue;
    if (!ir::dtype_is_float(graph.value(graph.nodes()[i].outputs[0]).dtype)) continue;
    const size_t n = fuse_after(graph, i, dead);
    products += n > 0 ? 1 : 0;
    absorbed += n;
  }
  erase_nodes(graph, dead);
  if (absorbed > 0) {
    ctx.note("fuse_epilogues: " + std::to_string(absorbed) + " nodes moved into " + std::to_string(products) +
             " Conv, ConvTranspose, Gemm and MatMul nodes");
  }
  return Status::ok();
}

}  // namespace kiln::passes
