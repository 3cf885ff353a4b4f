// Attention as exporters write it becomes one kiln.Attention node (inference graphs):
//   s = MatMul(q, kt) [* scale, as fuse_epilogues left it in the MatMul's epilogue]
//   s = Add(s, mask)                       optional: an f32 additive mask, either operand
//   p = Softmax(s, axis = -1)              or the last axis, when the rank is known
//   p = Cast(p, to = f32)                  optional
//   y = MatMul(p, v)
// becomes y = kiln.Attention(q, kt, v[, mask]) {scale}. The scores, the masked scores and the
// probabilities must have no other reader, and neither MatMul may carry a bias, an activation or
// a shift. Runs after fuse_epilogues, so that a Div or Mul of the scores by a constant is already
// the first MatMul's scale.
//
// Exporters split the heads with Transposes around it: q = Transpose(qs, perm [0, 2, 1, 3]),
// kt = Transpose(ks, [0, 2, 3, 1]), v = Transpose(vs, [0, 2, 1, 3]) of [batch, positions, heads,
// head size] tensors, and y back with Transpose(y, [0, 2, 1, 3]). When all four are there and
// only the attention reads the first three, they go too: the node reads qs, ks and vs and writes
// [batch, positions, heads, head size] itself {kiln.layout = "bshd"}.
#include "ir/epilogue.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::ValueId;

bool f32_value(const Graph& g, ValueId id) { return id != ir::kNoValue && g.value(id).dtype == ir::DType::kF32; }

// A MatMul with two operands and at most a scale in its epilogue; returns the scale.
std::optional<double> plain_matmul(const Node& n) {
  if (n.op != "MatMul" || n.inputs.size() != 2 || n.has_attr("kiln.b_transposed")) return std::nullopt;
  const ir::Epilogue e = ir::node_epilogue(n);
  if (e.activation != ir::Activation::kNone || e.shift != 0.0) return std::nullopt;
  return e.scale;
}

bool softmax_over_last_axis(const Graph& g, const Node& n) {
  if (n.op != "Softmax") return false;
  const int64_t axis = n.attr_int("axis", -1);
  if (axis == -1) return true;
  const ir::Value& x = g.value(n.inputs[0]);
  return x.shape_known && axis == static_cast<int64_t>(x.shape.size()) - 1;
}

// The input of node i when it is a Transpose with permutation `perm`.
std::optional<ValueId> transposed_from(const Graph& g, int64_t i, const std::vector<int64_t>& perm) {
  if (i < 0) return std::nullopt;
  const Node& n = g.nodes()[static_cast<size_t>(i)];
  if (n.op != "Transpose" || n.inputs.size() != 1 || n.attr_ints("perm") != perm) return std::nullopt;
  return n.inputs[0];
}

// Absorbs the head-splitting Transposes around the kiln.Attention node at `at` (see the top of
// the file); returns whether it did.
bool absorb_head_transposes(Graph& g, size_t at, std::vector<bool>& dead) {
  static const std::vector<int64_t> kHeads = {0, 2, 1, 3}, kKeys = {0, 2, 3, 1};
  const Node& att = g.nodes()[at];
  const int64_t tq = g.producer(att.inputs[0]), tk = g.producer(att.inputs[1]), tv = g.producer(att.inputs[2]);
  const auto qs = transposed_from(g, tq, kHeads), ks = transposed_from(g, tk, kKeys), vs = transposed_from(g, tv, kHeads);
  const int64_t ty = sole_reader(g, att.outputs[0], "Transpose");
  if (!qs || !ks || !vs || ty < 0 || !transposed_from(g, ty, kHeads)) return false;
  if (tq == tk || tq == tv || tk == tv) return false;
  for (const int64_t t : {tq, tk, tv}) {
    if (only_reader(g, g.nodes()[static_cast<size_t>(t)].outputs[0]) != static_cast<int64_t>(at)) return false;
  }
  Node& a = g.nodes()[at];
  a.inputs[0] = *qs;
  a.inputs[1] = *ks;
  a.inputs[2] = *vs;
  a.outputs[0] = g.nodes()[static_cast<size_t>(ty)].outputs[0];
  a.attrs["kiln.layout"] = std::string("bshd");
  for (const int64_t t : {tq, tk, tv, ty}) kill_node(g, static_cast<size_t>(t), dead);
  return true;
}

}  // namespace

Status run_fuse_attention(ir::Graph& graph, const PassContext& ctx) {
  std::vector<bool> dead(graph.nodes().size(), false);
  size_t fused = 0, heads = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (dead[i]) continue;
    const auto scale = plain_matmul(graph.nodes()[i]);
    if (!scale) continue;
    const Node& scores_mm = graph.nodes()[i];
    const ValueId q = scores_mm.inputs[0], kt = scores_mm.inputs[1];
    if (!f32_value(graph, q) || !f32_value(graph, kt)) continue;
    ValueId s = scores_mm.outputs[0], mask = ir::kNoValue;
    std::vector<size_t> absorbed = {i};
    int64_t next = only_reader(graph, s);
    if (next >= 0 && graph.nodes()[static_cast<size_t>(next)].op == "Add") {
      const Node& add = graph.nodes()[static_cast<size_t>(next)];
      mask = other_input(add, s);
      if (!f32_value(graph, mask)) continue;
      absorbed.push_back(static_cast<size_t>(next));
      s = add.outputs[0];
      next = only_reader(graph, s);
    }
    if (next < 0 || !softmax_over_last_axis(graph, graph.nodes()[static_cast<size_t>(next)])) continue;
    absorbed.push_back(static_cast<size_t>(next));
    ValueId p = graph.nodes()[static_cast<size_t>(next)].outputs[0];
    int64_t oi = only_reader(graph, p);
    if (oi >= 0 && graph.nodes()[static_cast<size_t>(oi)].op == "Cast" &&
        graph.nodes()[static_cast<size_t>(oi)].attr_str("to") == ir::dtype_name(ir::DType::kF32)) {
      absorbed.push_back(static_cast<size_t>(oi));  // the TorchScript exporter's Cast of the f32 probabilities to f32
      p = graph.nodes()[static_cast<size_t>(oi)].outputs[0];
      oi = only_reader(graph, p);
    }
    if (oi < 0) continue;
    Node& out_mm = graph.nodes()[static_cast<size_t>(oi)];
    const auto out_scale = plain_matmul(out_mm);
    if (!out_scale || *out_scale != 1.0 || out_mm.inputs[0] != p || out_mm.inputs[1] == p) continue;
    const ValueId v = out_mm.inputs[1];
    if (!f32_value(graph, v)) continue;
    out_mm.op = "kiln.Attention";
    out_mm.inputs = {q, kt, v};
    if (mask != ir::kNoValue) out_mm.inputs.push_back(mask);
    out_mm.attrs = {{"scale", *scale}};
    for (size_t a : absorbed) kill_node(graph, a, dead);
    ++fused;
    if (absorb_head_transposes(graph, static_cast<size_t>(oi), dead)) ++heads;
  }
  erase_nodes(graph, dead);
  if (fused > 0) ctx.note("fuse_attention: " + std::to_string(fused) + " MatMul-Softmax-MatMul chains became kiln.Attention");
  if (heads > 0) {
    ctx.note("fuse_attention: " + std::to_string(heads) + " of them read and write [batch, positions, heads, head size] (" +
             std::to_string(4 * heads) + " Transposes removed)");
  }
  return Status::ok();
}

}  // namespace kiln::passes
