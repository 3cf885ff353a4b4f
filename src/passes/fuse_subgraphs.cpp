// Subgraphs that exporters write for one operation become that operation (inference graphs):
//   HardSwish:  x * Clip(x + 3, 0, 6) / 6  (or * 1/6),  x * HardSigmoid(x, 1/6, 1/2)
//   Gelu:       x * 0.5 * (1 + Erf(x / sqrt(2)))  in the orders the PyTorch exporters write, and
//               the tanh form x * 0.5 * (1 + Tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
//   LayerNormalization over the last axis:
//       m = ReduceMean(x), d = x - m, v = ReduceMean(d^2) (Pow 2 or d * d),
//       y = d / Sqrt(v + epsilon) [* gamma [+ beta]]
//   kiln.AddLayerNorm(a, b, scale[, bias]): a LayerNormalization (with one output) of Add(a, b),
//       both activations, when the norm is the sum's only reader: the residual connections of
//       transformer encoders, whose sum the norm's first pass then makes row by row.
// Each intermediate value must have no reader outside the subgraph. The replaced nodes are
// disconnected and removed; the root node takes the fused op and keeps its output.
#include <cmath>

#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::ValueId;

const Node* node_at(const Graph& g, int64_t i) { return i < 0 ? nullptr : &g.nodes()[static_cast<size_t>(i)]; }

// The producer of `id` when it has op `op` and `id` has no other reader.
int64_t private_producer(const Graph& g, ValueId id, const char* op) {
  const int64_t p = g.producer(id);
  if (p < 0 || g.nodes()[static_cast<size_t>(p)].op != op || !single_reader(g, id)) return -1;
  return p;
}

// root = Div(m, 6) or Mul(m, 1/6); m = Mul(x, Clip(Add(x, 3), 0, 6)), or m = Mul(x, HardSigmoid(x))
// with alpha 1/6 and beta 1/2 (then m itself is the root).
bool match_hard_swish(Graph& g, size_t ri, std::vector<bool>& dead) {
  Node& root = g.nodes()[ri];
  if (root.op == "Mul" && root.inputs.size() == 2) {  // x * HardSigmoid(x)
    for (int side = 0; side < 2; ++side) {
      const ValueId x = root.inputs[static_cast<size_t>(side)], h = root.inputs[static_cast<size_t>(1 - side)];
      const int64_t hi = private_producer(g, h, "HardSigmoid");
      const Node* hs = node_at(g, hi);
      if (hs == nullptr || hs->inputs[0] != x || std::fabs(hs->attr_float("alpha", 0.2) - 1.0 / 6) > 1e-6 ||
          std::fabs(hs->attr_float("beta", 0.5) - 0.5) > 1e-6) {
        continue;
      }
      kill_node(g, static_cast<size_t>(hi), dead);
      root.op = "HardSwish";
      root.inputs = {x};
      root.attrs.clear();
      return true;
    }
  }
  if (root.inputs.size() != 2) return false;
  const bool div = root.op == "Div" && is_scalar(g, root.inputs[1], 6.0);
  const bool mul = root.op == "Mul" && (is_scalar(g, root.inputs[1], 1.0 / 6) || is_scalar(g, root.inputs[0], 1.0 / 6));
  if (!div && !mul) return false;
  const ValueId m = mul && is_scalar(g, root.inputs[0], 1.0 / 6) ? root.inputs[1] : root.inputs[0];
  const int64_t mi = private_producer(g, m, "Mul");
  if (mi < 0) return false;
  const Node& mn = g.nodes()[static_cast<size_t>(mi)];
  for (int side = 0; side < 2; ++side) {
    const ValueId x = mn.inputs[static_cast<size_t>(side)], c = mn.inputs[static_cast<size_t>(1 - side)];
    const int64_t ci = private_producer(g, c, "Clip");
    const Node* clip = node_at(g, ci);
    if (clip == nullptr || clip->inputs.size() != 3 || !is_scalar(g, clip->inputs[1], 0.0) ||
        !is_scalar(g, clip->inputs[2], 6.0)) {
      continue;
    }
    const int64_t ai = private_producer(g, clip->inputs[0], "Add");
    const Node* add = node_at(g, ai);
    if (add == nullptr || other_input(*add, x) == ir::kNoValue || !is_scalar(g, other_input(*add, x), 3.0)) continue;
    kill_node(g, static_cast<size_t>(ai), dead);
    kill_node(g, static_cast<size_t>(ci), dead);
    kill_node(g, static_cast<size_t>(mi), dead);
    root.op = "HardSwish";
    root.inputs = {x};
    root.attrs.clear();
    return true;
  }
  return false;
}

// The end both Gelu forms share: a = 1 + f(x) (read only here), then
// Mul(Mul(x, a), 0.5), Mul(Mul(x, 0.5), a) or Mul(x, Mul(a, 0.5)). Returns the last Mul's index and
// adds the one before it to `absorbed`, or -1.
int64_t match_half_x_times(const Graph& g, ValueId a, ValueId x, std::vector<int64_t>& absorbed) {
  const int64_t m1 = sole_reader(g, a, "Mul");
  if (m1 < 0) return -1;
  const Node& n1 = g.nodes()[static_cast<size_t>(m1)];
  const ValueId o1 = other_input(n1, a);
  if (o1 == x) {  // (x * a) * 0.5
    const int64_t m2 = sole_reader(g, n1.outputs[0], "Mul");
    if (m2 < 0 || !is_scalar(g, other_input(g.nodes()[static_cast<size_t>(m2)], n1.outputs[0]), 0.5)) return -1;
    absorbed.push_back(m1);
    return m2;
  }
  if (is_scalar(g, o1, 0.5)) {  // x * (a * 0.5)
    const int64_t m2 = sole_reader(g, n1.outputs[0], "Mul");
    if (m2 < 0 || other_input(g.nodes()[static_cast<size_t>(m2)], n1.outputs[0]) != x) return -1;
    absorbed.push_back(m1);
    return m2;
  }
  const int64_t hi = private_producer(g, o1, "Mul");  // (x * 0.5) * a
  if (hi < 0) return -1;
  const Node& h = g.nodes()[static_cast<size_t>(hi)];
  if (other_input(h, x) == ir::kNoValue || !is_scalar(g, other_input(h, x), 0.5)) return -1;
  absorbed.push_back(hi);
  return m1;
}

// f = Erf(...) or Tanh(...) of x, the nodes computing it in `absorbed`: when a = f + 1 ends in the
// shared Gelu end, that end's last Mul becomes Gelu(x) and the rest are removed.
bool finish_gelu(Graph& g, ValueId f, ValueId x, std::vector<int64_t> absorbed, const char* approximate,
                 std::vector<bool>& dead) {
  const int64_t ai = sole_reader(g, f, "Add");
  if (ai < 0 || !is_scalar(g, other_input(g.nodes()[static_cast<size_t>(ai)], f), 1.0)) return false;
  absorbed.push_back(ai);
  const int64_t root = match_half_x_times(g, g.nodes()[static_cast<size_t>(ai)].outputs[0], x, absorbed);
  if (root < 0) return false;
  for (int64_t i : absorbed) kill_node(g, static_cast<size_t>(i), dead);
  Node& r = g.nodes()[static_cast<size_t>(root)];
  r.op = "Gelu";
  r.inputs = {x};
  r.attrs = {{"approximate", std::string(approximate)}};
  return true;
}

// Rooted at Erf(d), d = x / sqrt(2) or x * (1 / sqrt(2)); a = Erf + 1; then the shared end.
bool match_gelu(Graph& g, size_t ei, std::vector<bool>& dead) {
  const Node& erf = g.nodes()[ei];
  if (erf.op != "Erf") return false;
  const int64_t di = g.producer(erf.inputs[0]);
  const Node* d = node_at(g, di);
  if (d == nullptr || !single_reader(g, erf.inputs[0]) || d->inputs.size() != 2) return false;
  ValueId x = ir::kNoValue;
  if (d->op == "Div" && is_scalar(g, d->inputs[1], std::sqrt(2.0), 1e-4)) x = d->inputs[0];
  if (d->op == "Mul" && is_scalar(g, d->inputs[1], std::sqrt(0.5), 1e-4)) x = d->inputs[0];
  if (d->op == "Mul" && is_scalar(g, d->inputs[0], std::sqrt(0.5), 1e-4)) x = d->inputs[1];
  if (x == ir::kNoValue) return false;
  return finish_gelu(g, erf.outputs[0], x, {static_cast<int64_t>(ei), di}, "none", dead);
}

// The tanh approximation (GPT-2's gelu_new), rooted at Tanh(u):
//   u = (x + Pow(x, 3) * 0.044715) * sqrt(2 / pi), a = Tanh + 1, then the shared end.
bool match_gelu_tanh(Graph& g, size_t ti, std::vector<bool>& dead) {
  const Node& tanh = g.nodes()[ti];
  if (tanh.op != "Tanh") return false;
  const int64_t ui = private_producer(g, tanh.inputs[0], "Mul");
  if (ui < 0) return false;
  const Node& u = g.nodes()[static_cast<size_t>(ui)];
  ValueId sum = ir::kNoValue;
  for (int side = 0; side < 2; ++side) {
    if (is_scalar(g, u.inputs[static_cast<size_t>(1 - side)], std::sqrt(2.0 / M_PI), 1e-4)) sum = u.inputs[static_cast<size_t>(side)];
  }
  const int64_t si = sum == ir::kNoValue ? -1 : private_producer(g, sum, "Add");
  if (si < 0) return false;
  const Node& add = g.nodes()[static_cast<size_t>(si)];
  for (int side = 0; side < 2; ++side) {
    const ValueId x = add.inputs[static_cast<size_t>(side)], cubic = add.inputs[static_cast<size_t>(1 - side)];
    const int64_t ci = private_producer(g, cubic, "Mul");
    if (ci < 0) continue;
    const Node& cm = g.nodes()[static_cast<size_t>(ci)];
    ValueId pw = ir::kNoValue;
    for (int k = 0; k < 2; ++k) {
      if (is_scalar(g, cm.inputs[static_cast<size_t>(1 - k)], 0.044715, 1e-4)) pw = cm.inputs[static_cast<size_t>(k)];
    }
    const int64_t pi = pw == ir::kNoValue ? -1 : private_producer(g, pw, "Pow");
    if (pi < 0 || g.nodes()[static_cast<size_t>(pi)].inputs[0] != x || !is_scalar(g, g.nodes()[static_cast<size_t>(pi)].inputs[1], 3.0)) {
      continue;
    }
    return finish_gelu(g, tanh.outputs[0], x, {pi, ci, si, ui, static_cast<int64_t>(ti)}, "tanh", dead);
  }
  return false;
}

// Whether ReduceMean node `n` averages over the last axis only, keeping it.
bool reduces_last_axis(const Graph& g, const Node& n) {
  if (n.op != "ReduceMean" || n.inputs.size() != 2 || n.attr_int("keepdims", 1) != 1) return false;
  const auto axes = i64_constant(g, n.inputs[1]);
  if (!axes || axes->size() != 1) return false;
  if ((*axes)[0] == -1) return true;
  const ir::Value& x = g.value(n.inputs[0]);
  return x.shape_known && !x.shape.empty() && (*axes)[0] == static_cast<int64_t>(x.shape.size()) - 1;
}

// Rooted at the first ReduceMean.
bool match_layer_norm(Graph& g, size_t mi, std::vector<bool>& dead) {
  const Node& mean = g.nodes()[mi];
  if (!reduces_last_axis(g, mean)) return false;
  const ValueId x = mean.inputs[0];
  const int64_t si = sole_reader(g, mean.outputs[0], "Sub");
  if (si < 0 || g.nodes()[static_cast<size_t>(si)].inputs[0] != x) return false;
  const ValueId d = g.nodes()[static_cast<size_t>(si)].outputs[0];
  const std::vector<size_t> readers = g.consumers(d);
  if (readers.size() != 2 || is_graph_output(g, d)) return false;
  int64_t sq = -1, div = -1;
  for (size_t r : readers) {
    const Node& n = g.nodes()[r];
    if (n.op == "Pow" && n.inputs[0] == d && is_scalar(g, n.inputs[1], 2.0)) sq = static_cast<int64_t>(r);
    if (n.op == "Mul" && n.inputs[0] == d && n.inputs[1] == d) sq = static_cast<int64_t>(r);
    if (n.op == "Div" && n.inputs[0] == d) div = static_cast<int64_t>(r);
  }
  if (sq < 0 || div < 0) return false;
  const int64_t vi = sole_reader(g, g.nodes()[static_cast<size_t>(sq)].outputs[0], "ReduceMean");
  if (vi < 0 || !reduces_last_axis(g, g.nodes()[static_cast<size_t>(vi)])) return false;
  const ValueId v = g.nodes()[static_cast<size_t>(vi)].outputs[0];
  const int64_t ei = sole_reader(g, v, "Add");
  if (ei < 0) return false;
  const auto epsilon = scalar_constant(g, other_input(g.nodes()[static_cast<size_t>(ei)], v));
  if (!epsilon) return false;
  const int64_t qi = sole_reader(g, g.nodes()[static_cast<size_t>(ei)].outputs[0], "Sqrt");
  if (qi < 0) return false;
  const ValueId root_std = g.nodes()[static_cast<size_t>(qi)].outputs[0];
  if (!single_reader(g, root_std) || g.nodes()[static_cast<size_t>(div)].inputs[1] != root_std) return false;
  // The scale is required (its length is the normalised size); the shift is optional.
  const ValueId normed = g.nodes()[static_cast<size_t>(div)].outputs[0];
  const int64_t gi = sole_reader(g, normed, "Mul");
  if (gi < 0) return false;
  const ValueId gamma = other_input(g.nodes()[static_cast<size_t>(gi)], normed);
  if (gamma == ir::kNoValue || !g.value(gamma).is_weight || g.weight(gamma).shape.size() != 1 ||
      g.weight(gamma).dtype != ir::DType::kF32) {
    return false;
  }
  const int64_t channels = g.weight(gamma).shape[0];
  int64_t root = gi;
  ValueId beta = ir::kNoValue;
  const int64_t bi = sole_reader(g, g.nodes()[static_cast<size_t>(gi)].outputs[0], "Add");
  if (bi >= 0) {
    const ValueId b = other_input(g.nodes()[static_cast<size_t>(bi)], g.nodes()[static_cast<size_t>(gi)].outputs[0]);
    if (b != ir::kNoValue && g.value(b).is_weight && g.weight(b).dtype == ir::DType::kF32 &&
        g.weight(b).shape == std::vector<int64_t>{channels}) {
      beta = b;
      root = bi;
    }
  }
  for (int64_t i : {static_cast<int64_t>(mi), si, sq, vi, ei, qi, div}) kill_node(g, static_cast<size_t>(i), dead);
  if (root != gi) kill_node(g, static_cast<size_t>(gi), dead);
  Node& r = g.nodes()[static_cast<size_t>(root)];
  r.op = "LayerNormalization";
  r.inputs = {x, gamma};
  if (beta != ir::kNoValue) r.inputs.push_back(beta);
  r.attrs = {{"axis", int64_t{-1}}, {"epsilon", *epsilon}, {"stash_type", int64_t{1}}};
  return true;
}

// Rooted at a LayerNormalization; runs after the other matches, so that norms they made count.
bool match_add_layer_norm(Graph& g, size_t li, std::vector<bool>& dead) {
  const Node& ln = g.nodes()[li];
  if (ln.op != "LayerNormalization" || ln.outputs.size() != 1 || ln.inputs.size() < 2) return false;
  const int64_t ai = private_producer(g, ln.inputs[0], "Add");
  if (ai < 0) return false;
  const Node& add = g.nodes()[static_cast<size_t>(ai)];
  if (add.inputs.size() != 2 || g.value(add.inputs[0]).is_weight || g.value(add.inputs[1]).is_weight) return false;
  Node& r = g.nodes()[li];
  std::vector<ValueId> inputs = {add.inputs[0], add.inputs[1]};
  inputs.insert(inputs.end(), r.inputs.begin() + 1, r.inputs.end());
  while (inputs.size() > 3 && inputs.back() == ir::kNoValue) inputs.pop_back();
  kill_node(g, static_cast<size_t>(ai), dead);
  r.op = "kiln.AddLayerNorm";
  r.inputs = std::move(inputs);
  return true;
}

}  // namespace

Status run_fuse_subgraphs(ir::Graph& graph, const PassContext& ctx) {
  std::vector<bool> dead(graph.nodes().size(), false);
  size_t hard_swish = 0, gelu = 0, layer_norm = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (dead[i]) continue;
    if (match_layer_norm(graph, i, dead)) {
      ++layer_norm;
    } else if (match_gelu(graph, i, dead) || match_gelu_tanh(graph, i, dead)) {
      ++gelu;
    } else if (match_hard_swish(graph, i, dead)) {
      ++hard_swish;
    }
  }
  size_t add_norm = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (!dead[i] && match_add_layer_norm(graph, i, dead)) ++add_norm;
  }
  erase_nodes(graph, dead);
  if (hard_swish + gelu + layer_norm > 0) {
    ctx.note("fuse_subgraphs: " + std::to_string(layer_norm) + " LayerNormalization, " + std::to_string(gelu) +
             " Gelu and " + std::to_string(hard_swish) + " HardSwish subgraphs became single nodes");
  }
  if (add_norm > 0) {
    ctx.note("fuse_subgraphs: " + std::to_string(add_norm) + " Add + LayerNormalization pairs became kiln.AddLayerNorm");
  }
  return Status::ok();
}

}  // namespace kiln::passes
