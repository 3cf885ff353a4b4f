#include "ir/tensor_ops.h"

#include <vector>

#include "ir/ops.h"

namespace kiln::ir {
namespace {

constexpr int kMany = 1 << 20;

OpInfo tensor_op(std::string name, int min_in, int max_in, int min_out = 1, int max_out = 1) {
  OpInfo info;
  info.name = std::move(name);
  info.family = OpFamily::kTensor;
  info.min_inputs = min_in;
  info.max_inputs = max_in;
  info.min_outputs = min_out;
  info.max_outputs = max_out;
  return info;
}

std::vector<OpInfo> make_registry() {
  std::vector<OpInfo> ops;
  for (const char* unary :
       {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan",
        "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh", "Erf", "Sigmoid", "Relu",
        "Softplus", "Softsign", "Elu", "Selu", "Celu", "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "ThresholdedRelu",
        "Shrink", "Not", "IsNaN", "IsInf", "Identity", "Cast", "Shape", "Size", "NonZero", "EyeLike",
        "GlobalAveragePool", "GlobalMaxPool", "Flatten", "Transpose", "DepthToSpace", "SpaceToDepth",
        "Softmax", "LogSoftmax", "Hardmax", "LRN", "MeanVarianceNormalization", "ConstantOfShape",
        "HannWindow", "HammingWindow", "BlackmanWindow", "Det"}) {
    ops.push_back(tensor_op(unary, 1, 1));
  }
  for (const char* binary : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less",
                             "LessOrEqual", "Greater", "GreaterOrEqual", "BitShift", "PRelu", "CastLike",
                             "Expand", "Tile", "Reshape", "GatherElements", "GatherND", "CumSum",
                             "Compress"}) {
    ops.push_back(tensor_op(binary, 2, 2));
  }
  for (const char* variadic : {"Max", "Min", "Sum", "Mean", "Concat"}) ops.push_back(tensor_op(variadic, 1, kMany));
  for (const char* reduce : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                             "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "Squeeze",
                             "Unsqueeze"}) {
    ops.push_back(tensor_op(reduce, 1, 2));
  }
  ops.push_back(tensor_op("ArgMax", 1, 1));
  ops.push_back(tensor_op("ArgMin", 1, 1));
  ops.push_back(tensor_op("Clip", 1, 3));
  ops.push_back(tensor_op("Where", 3, 3));
  ops.push_back(tensor_op("Gather", 2, 2));
  ops.push_back(tensor_op("Slice", 3, 5));
  ops.push_back(tensor_op("Split", 1, 2, 1, kMany));
  ops.push_back(tensor_op("Pad", 2, 4));
  ops.push_back(tensor_op("Range", 3, 3));
  ops.push_back(tensor_op("Trilu", 1, 2));
  ops.push_back(tensor_op("OneHot", 3, 3));
  ops.push_back(tensor_op("TopK", 2, 2, 2, 2));
  ops.push_back(tensor_op("Dropout", 1, 3, 1, 2));
  ops.push_back(tensor_op("MatMul", 2, 3));  // the third: a bias fused by the build (ir/epilogue.h)
  ops.push_back(tensor_op("Gemm", 2, 3));
  ops.push_back(tensor_op("Conv", 2, 3));
  ops.push_back(tensor_op("ConvTranspose", 2, 3));
  ops.push_back(tensor_op("MaxPool", 1, 1, 1, 2));
  ops.push_back(tensor_op("AveragePool", 1, 1));
  ops.push_back(tensor_op("MaxUnpool", 2, 3));
  ops.push_back(tensor_op("BatchNormalization", 5, 5));
  ops.push_back(tensor_op("InstanceNormalization", 3, 3));
  ops.push_back(tensor_op("LayerNormalization", 2, 3, 1, 3));
  ops.push_back(tensor_op("NegativeLogLikelihoodLoss", 2, 3));
  ops.push_back(tensor_op("ScatterElements", 3, 3));
  ops.push_back(tensor_op("ScatterND", 3, 3));
  ops.push_back(tensor_op("QuantizeLinear", 2, 3));
  ops.push_back(tensor_op("DequantizeLinear", 2, 3));
  ops.push_back(tensor_op("DynamicQuantizeLinear", 1, 1, 3, 3));
  ops.push_back(tensor_op("Resize", 1, 4));
  ops.push_back(tensor_op("Einsum", 1, kMany));
  ops.push_back(tensor_op("Unique", 1, 1, 1, 4));
  ops.push_back(tensor_op("GridSample", 2, 2));
  ops.push_back(tensor_op("RoiAlign", 3, 3));
  ops.push_back(tensor_op("DFT", 1, 2));
  ops.push_back(tensor_op("STFT", 2, 4));
  ops.push_back(tensor_op("MelWeightMatrix", 5, 5));
  ops.push_back(tensor_op("TfIdfVectorizer", 1, 1));
  ops.push_back(tensor_op("NonMaxSuppression", 2, 5));
  ops.push_back(tensor_op("ConvInteger", 2, 4));
  ops.push_back(tensor_op("QLinearMatMul", 8, 8));
  ops.push_back(tensor_op("QLinearConv", 8, 9));
  ops.push_back(tensor_op("MatMulInteger", 2, 4));
  ops.push_back(tensor_op("LSTM", 3, 8, 0, 3));
  ops.push_back(tensor_op("GRU", 3, 6, 0, 2));
  ops.push_back(tensor_op("RNN", 3, 6, 0, 2));
  // Kiln's own, made by the build (passes/fuse_attention.cpp), never read from a file:
  // softmax(scale * q kt + mask) v.
  ops.push_back(tensor_op("kiln.Attention", 3, 4));
  // LayerNormalization of a + b (passes/fuse_subgraphs.cpp): a, b, scale, bias.
  ops.push_back(tensor_op("kiln.AddLayerNorm", 3, 4));
  // Control flow (ONNX If, imported flat; see tensor_ops.h): cond, then outputs, else outputs.
  ops.push_back(tensor_op("kiln.Select", 3, kMany, 1, kMany));
  // Calibrated int8 products (passes/quantize_int8.cpp): x, int8 weight, weight scales, bias.
  ops.push_back(tensor_op("kiln.QConv", 3, 4));
  ops.push_back(tensor_op("kiln.QMatMul", 3, 4));
  return ops;
}

const std::vector<OpInfo>& registry() {
  static const std::vector<OpInfo> ops = make_registry();
  return ops;
}

}  // namespace

std::vector<Guard> node_guards(const Node& node) {
  std::vector<Guard> out;
  const std::vector<int64_t> pairs = node.attr_ints("kiln.guard");
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) out.push_back({static_cast<ValueId>(pairs[i]), pairs[i + 1] != 0});
  return out;
}

bool guards_hold(const std::vector<Guard>& guards, const std::function<const Tensor*(ValueId)>& value) {
  for (const Guard& g : guards) {
    const Tensor* cond = value(g.cond);
    if (cond == nullptr || !cond->defined() || cond->numel() != 1) return false;
    if ((tensor_get_i64(*cond, 0) != 0) != g.branch) return false;
  }
  return true;
}

const OpInfo* tensor_op_info(const std::string& name) {
  for (const auto& op : registry()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

std::vector<std::string> tensor_op_names() {
  std::vector<std::string> names;
  for (const auto& op : registry()) names.push_back(op.name);
  return names;
}

Expected<std::vector<std::vector<int64_t>>> infer_tensor_shapes(const Graph& graph, const Node& node,
                                                                 const OpInfo& info) {
  auto count_error = [&](const char* what, size_t got, int lo, int hi) {
    std::string range = std::to_string(lo);
    if (hi != lo) range += hi >= kMany ? " or more" : "-" + std::to_string(hi);
    return invalid_argument("node '" + node.name + "' (" + node.op + "): expected " + range + " " + what +
                            ", got " + std::to_string(got));
  };
  const auto n_in = static_cast<int>(node.inputs.size()), n_out = static_cast<int>(node.outputs.size());
  if (n_in < info.min_inputs || n_in > info.max_inputs) {
    return count_error("inputs", node.inputs.size(), info.min_inputs, info.max_inputs);
  }
  if (n_out < info.min_outputs || n_out > info.max_outputs) {
    return count_error("outputs", node.outputs.size(), info.min_outputs, info.max_outputs);
  }
  std::vector<std::vector<int64_t>> shapes;
  for (ValueId out : node.outputs) {
    if (out < 0 || static_cast<size_t>(out) >= graph.values().size()) {
      return invalid_argument("node '" + node.name + "': output id out of range");
    }
    shapes.push_back(graph.value(out).shape);
  }
  return shapes;
}

}  // namespace kiln::ir
