// ONNX reductions and normalising reductions over an axis: Reduce*, ArgMax / ArgMin, Softmax,
// LogSoftmax, Hardmax, CumSum, TopK. Opset rewrites:
//   Reduce* `axes` attribute (ReduceSum < 13, the others < 18) -> a constant second input.
//   Softmax / LogSoftmax / Hardmax (opset < 13) work on x flattened to 2-D at `axis` (default 1):
//     Flatten(axis) -> op(axis = -1) -> Reshape to Shape(x).
//   TopK (opset < 10): `k` attribute -> a constant input.
#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

Status reduce(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t keep, node.int_in("keepdims", 1, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t noop, node.int_in("noop_with_empty_axes", 0, 0, 1));
  std::map<std::string, ir::Attr> attrs = {{"keepdims", keep}, {"noop_with_empty_axes", noop}};
  std::vector<ir::ValueId> inputs = {node.input(0)};
  if (node.attrs.count("axes")) {
    const auto* axes = std::get_if<std::vector<int64_t>>(&node.attrs.at("axes"));
    if (axes == nullptr) return node.error("attribute 'axes' must be a list of ints");
    inputs.push_back(out.constant_i64(node, "axes", *axes));
  } else if (node.input(1) != ir::kNoValue) {
    inputs.push_back(node.input(1));
  }
  out.add(node.op_type, node.name, inputs, node.outputs, attrs);
  return Status::ok();
}

Status arg_reduce(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t keep, node.int_in("keepdims", 1, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t last, node.int_in("select_last_index", 0, 0, 1));
  out.graph().value(node.outputs[0]).dtype = ir::DType::kI64;
  out.add(node.op_type, node.name, node.inputs, node.outputs,
          {{"axis", node.attr_int("axis", 0)}, {"keepdims", keep}, {"select_last_index", last}});
  return Status::ok();
}

Status softmax_family(const OnnxNode& node, OnnxEmitter& out) {
  if (node.opset >= 13) {
    out.add(node.op_type, node.name, node.inputs, node.outputs, {{"axis", node.attr_int("axis", -1)}});
    return Status::ok();
  }
  const ir::DType dtype = out.graph().value(node.input(0)).dtype;
  ir::ValueId flat = out.temp(node, "flat", dtype);
  ir::ValueId soft = out.temp(node, "2d", dtype);
  ir::ValueId shape = out.temp(node, "shape", ir::DType::kI64);
  out.add("Flatten", node.name + "/flatten", {node.input(0)}, {flat}, {{"axis", node.attr_int("axis", 1)}});
  out.add(node.op_type, node.name + "/2d", {flat}, {soft}, {{"axis", int64_t{-1}}});
  out.add("Shape", node.name + "/shape", {node.input(0)}, {shape}, {});
  out.add("Reshape", node.name, {soft, shape}, node.outputs, {});
  return Status::ok();
}

Status cum_sum(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t exclusive, node.int_in("exclusive", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t reverse, node.int_in("reverse", 0, 0, 1));
  out.add("CumSum", node.name, node.inputs, node.outputs, {{"exclusive", exclusive}, {"reverse", reverse}});
  return Status::ok();
}

Status top_k(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t largest, node.int_in("largest", 1, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t sorted, node.int_in("sorted", 1, 0, 1));
  std::vector<ir::ValueId> inputs = node.inputs;
  if (node.opset < 10) {
    if (!node.attrs.count("k")) return node.error("attribute 'k' is required");
    inputs = {node.input(0), out.constant_i64(node, "k", {node.attr_int("k", 0)})};
  }
  if (node.outputs.size() > 1) out.graph().value(node.outputs[1]).dtype = ir::DType::kI64;
  out.add("TopK", node.name, inputs, node.outputs,
          {{"axis", node.attr_int("axis", -1)}, {"largest", largest}, {"sorted", sorted}});
  return Status::ok();
}

Status nll_loss(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string reduction, node.string_in("reduction", "mean", {"none", "sum", "mean"}));
  std::map<std::string, ir::Attr> attrs = {{"reduction", reduction}};
  if (node.has("ignore_index")) attrs["ignore_index"] = node.attr_int("ignore_index", 0);
  out.add("NegativeLogLikelihoodLoss", node.name, node.inputs, node.outputs, attrs);
  return Status::ok();
}

// SoftmaxCrossEntropyLoss(scores [N, C, ...], labels) = NLL(LogSoftmax(scores, axis 1), labels);
// the optional second output is the log-probabilities.
Status softmax_cross_entropy(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string reduction, node.string_in("reduction", "mean", {"none", "sum", "mean"}));
  std::map<std::string, ir::Attr> attrs = {{"reduction", reduction}};
  if (node.has("ignore_index")) attrs["ignore_index"] = node.attr_int("ignore_index", 0);
  const ir::DType dtype = out.graph().value(node.input(0)).dtype;
  const ir::ValueId log_prob = node.outputs.size() > 1 ? node.outputs[1] : out.temp(node, "log_prob", dtype);
  out.add("LogSoftmax", node.name + "/log_softmax", {node.input(0)}, {log_prob}, {{"axis", int64_t{1}}});
  std::vector<ir::ValueId> inputs = {log_prob, node.input(1)};
  if (node.input(2) != ir::kNoValue) inputs.push_back(node.input(2));
  out.add("NegativeLogLikelihoodLoss", node.name, inputs, {node.outputs[0]}, attrs);
  return Status::ok();
}

}  // namespace

void register_onnx_reduce_ops(OnnxTranslatorTable& table) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    table[op] = reduce;
  }
  table["ArgMax"] = arg_reduce;
  table["ArgMin"] = arg_reduce;
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) table[op] = softmax_family;
  table["CumSum"] = cum_sum;
  table["TopK"] = top_k;
  table["NegativeLogLikelihoodLoss"] = nll_loss;
  table["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy;
}

}  // namespace kiln::formats
