#include "ir/ops.h"

#include "ir/tensor_ops.h"

#include <array>
#include <numeric>

namespace kiln::ir {
namespace {

const std::array kOps = {
    OpInfo{"embedding", false},   OpInfo{"matmul", false},     OpInfo{"rms_norm", false},
    OpInfo{"layer_norm", false},  OpInfo{"add", false},        OpInfo{"mul", false},
    OpInfo{"silu", false},        OpInfo{"gelu_tanh", false},  OpInfo{"silu_mul", false},
    OpInfo{"split", false},       OpInfo{"rope", false},       OpInfo{"attention", false},
    OpInfo{"gather_rows", false}, OpInfo{"transpose", true},   OpInfo{"normalize_rows", true},
};

using Shape = std::vector<int64_t>;
using Shapes = std::vector<Shape>;

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += s[i] == kTokens ? "tokens" : s[i] == kRows ? "rows" : std::to_string(s[i]);
  }
  return out + "]";
}

Status shape_error(const Node& node, const std::string& what) {
  return invalid_argument("node '" + node.name + "' (" + node.op + "): " + what);
}

}  // namespace

const OpInfo* op_info(const std::string& name) {
  for (const auto& op : kOps) {
    if (op.name == name) return &op;
  }
  return tensor_op_info(name);
}

Expected<std::vector<std::vector<int64_t>>> infer_shapes(const Graph& graph, const Node& node) {
  const OpInfo* info = op_info(node.op);
  if (info == nullptr) return shape_error(node, "unknown op");
  if (info->family == OpFamily::kTensor) return infer_tensor_shapes(graph, node, *info);
  std::vector<Shape> in;
  for (ValueId id : node.inputs) {
    if (id < 0 || static_cast<size_t>(id) >= graph.values().size()) {
      return shape_error(node, "input id out of range");
    }
    in.push_back(graph.value(id).shape);
  }
  auto need_inputs = [&](size_t lo, size_t hi) -> Status {
    if (in.size() < lo || in.size() > hi) {
      return shape_error(node, "expected " + std::to_string(lo) + (lo == hi ? "" : "-" + std::to_string(hi)) +
                                   " inputs, got " + std::to_string(in.size()));
    }
    for (const auto& s : in) {
      if (s.empty() || s.size() > 2) return shape_error(node, "inputs must be 1-D or 2-D, got " + shape_str(s));
    }
    return Status::ok();
  };
  const std::string& op = node.op;
  if (op == "embedding") {
    KILN_RETURN_IF_ERROR(need_inputs(2, 2));
    if (in[0].size() != 1 || in[1].size() != 2) return shape_error(node, "expects ids [T] and table [V, H]");
    return Shapes{{in[0][0], in[1][1]}};
  }
  if (op == "matmul") {
    KILN_RETURN_IF_ERROR(need_inputs(2, 3));
    if (in[0].size() != 2 || in[1].size() != 2) return shape_error(node, "expects x [M, K] and w [N, K]");
    if (in[0][1] != in[1][1]) {
      return shape_error(node, "x " + shape_str(in[0]) + " does not match w " + shape_str(in[1]));
    }
    if (in.size() == 3 && (in[2].size() != 1 || in[2][0] != in[1][0])) {
      return shape_error(node, "bias " + shape_str(in[2]) + " does not match w " + shape_str(in[1]));
    }
    return Shapes{{in[0][0], in[1][0]}};
  }
  if (op == "rms_norm" || op == "layer_norm") {
    KILN_RETURN_IF_ERROR(need_inputs(op == "rms_norm" ? 2 : 3, op == "rms_norm" ? 2 : 3));
    for (size_t i = 1; i < in.size(); ++i) {
      if (in[i].size() != 1 || in[i][0] != in[0].back()) {
        return shape_error(node, "weight " + shape_str(in[i]) + " does not match x " + shape_str(in[0]));
      }
    }
    return Shapes{in[0]};
  }
  if (op == "add" || op == "mul") {
    KILN_RETURN_IF_ERROR(need_inputs(2, 2));
    if (in[0] != in[1]) return shape_error(node, shape_str(in[0]) + " vs " + shape_str(in[1]));
    return Shapes{in[0]};
  }
  if (op == "silu" || op == "gelu_tanh") {
    KILN_RETURN_IF_ERROR(need_inputs(1, 1));
    return Shapes{in[0]};
  }
  if (op == "silu_mul") {
    KILN_RETURN_IF_ERROR(need_inputs(1, 1));
    if (in[0].size() != 2 || in[0][1] % 2 != 0) return shape_error(node, "expects [M, 2*I]");
    return Shapes{{in[0][0], in[0][1] / 2}};
  }
  if (op == "split") {
    KILN_RETURN_IF_ERROR(need_inputs(1, 1));
    auto sizes = node.attr_ints("sizes");
    if (sizes.size() != node.outputs.size() ||
        std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != in[0].back()) {
      return shape_error(node, "sizes do not add up to " + std::to_string(in[0].back()));
    }
    Shapes out;
    for (int64_t s : sizes) out.push_back({in[0][0], s});
    return out;
  }
  if (op == "rope") {
    KILN_RETURN_IF_ERROR(need_inputs(2, 2));
    const int64_t heads = node.attr_int("num_heads"), dim = node.attr_int("head_dim");
    const int64_t rot = node.attr_int("rotary_dim");
    if (in[0].size() != 2 || heads * dim != in[0][1] || rot <= 0 || rot > dim || rot % 2) {
      return shape_error(node, "x " + shape_str(in[0]) + " does not fit num_heads * head_dim / rotary_dim");
    }
    return Shapes{in[0]};
  }
  if (op == "attention") {
    KILN_RETURN_IF_ERROR(need_inputs(3, 3));
    const int64_t h = node.attr_int("num_heads"), g = node.attr_int("num_kv_heads");
    const int64_t d = node.attr_int("head_dim");
    if (h <= 0 || g <= 0 || d <= 0 || h % g != 0) return shape_error(node, "bad head counts");
    if (in[0] != Shape{in[0][0], h * d} || in[1] != Shape{in[0][0], g * d} || in[2] != in[1]) {
      return shape_error(node, "q/k/v shapes " + shape_str(in[0]) + " " + shape_str(in[1]) + " " +
                                   shape_str(in[2]) + " do not fit the head counts");
    }
    return Shapes{in[0]};
  }
  if (op == "gather_rows") {
    KILN_RETURN_IF_ERROR(need_inputs(2, 2));
    if (in[0].size() != 2 || in[1].size() != 1) return shape_error(node, "expects x [T, C] and rows [R]");
    return Shapes{{in[1][0], in[0][1]}};
  }
  if (op == "transpose") {
    KILN_RETURN_IF_ERROR(need_inputs(1, 1));
    if (in[0].size() != 2) return shape_error(node, "expects a 2-D weight");
    return Shapes{{in[0][1], in[0][0]}};
  }
  if (op == "normalize_rows") {
    KILN_RETURN_IF_ERROR(need_inputs(1, 1));
    return Shapes{in[0]};
  }
  return shape_error(node, "no shape rule");
}

}  // namespace kiln::ir
