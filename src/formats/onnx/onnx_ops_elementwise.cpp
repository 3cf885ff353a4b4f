// ONNX elementwise ops: unary math and activations, broadcasting binary and variadic ops,
// comparisons and logic, Where, Clip, Cast / CastLike. All are emitted as the Kiln tensor op of
// the same name; what changes across opsets is rewritten here:
//   Clip (opset < 11): min / max attributes -> constant inputs.
//   Add, Sub, Mul, Div, ... (opset < 7): the legacy `broadcast` / `axis` attributes are refused.
// Comparison, logic and IsNaN/IsInf outputs are bool; Cast's `to` becomes a Kiln dtype name.
#include "formats/onnx/onnx_tensor.h"
#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

Status binary(const OnnxNode& node, OnnxEmitter& out) {
  if (node.has("broadcast") || node.has("axis")) {
    return node.error("the legacy (opset < 7) broadcast/axis attributes are not supported");
  }
  out.add_same(node);
  return Status::ok();
}

Status boolean_result(const OnnxNode& node, OnnxEmitter& out) {
  if (node.has("broadcast")) return node.error("the legacy (opset < 7) broadcast attribute is not supported");
  out.graph().value(node.outputs[0]).dtype = ir::DType::kBool;
  out.add_same(node);
  return Status::ok();
}

Status clip(const OnnxNode& node, OnnxEmitter& out) {
  if (node.opset >= 11) return translate_same(node, out);
  ir::Tensor lo(ir::DType::kF32, {}), hi(ir::DType::kF32, {});
  KILN_ASSIGN_OR_RETURN(double min, node.float_in("min", -3.4028234663852886e38));
  KILN_ASSIGN_OR_RETURN(double max, node.float_in("max", 3.4028234663852886e38));
  lo.mutable_data<float>()[0] = static_cast<float>(min);
  hi.mutable_data<float>()[0] = static_cast<float>(max);
  out.add("Clip", node.name, {node.input(0), out.constant(node, "min", lo), out.constant(node, "max", hi)},
          node.outputs, {});
  return Status::ok();
}

Status cast(const OnnxNode& node, OnnxEmitter& out) {
  if (!node.attrs.count("to")) return node.error("attribute 'to' is required");
  const auto* to = std::get_if<int64_t>(&node.attrs.at("to"));
  if (to == nullptr) return node.error("attribute 'to' must be an int");
  auto dtype = onnx_dtype(static_cast<int>(*to));
  if (!dtype) return node.error("cast to " + onnx_dtype_name(static_cast<int>(*to)) + " is not supported");
  out.graph().value(node.outputs[0]).dtype = *dtype;
  out.add("Cast", node.name, node.inputs, node.outputs, {{"to", std::string(ir::dtype_name(*dtype))}});
  return Status::ok();
}

Status cast_like(const OnnxNode& node, OnnxEmitter& out) {
  if (node.input(1) == ir::kNoValue) return node.error("input 'target_type' is missing");
  out.graph().value(node.outputs[0]).dtype = out.graph().value(node.input(1)).dtype;
  out.add_same(node);
  return Status::ok();
}

Status bit_shift(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string dir, node.string_in("direction", "", {"LEFT", "RIGHT"}));
  out.add_same(node);
  return Status::ok();
}

Status mod(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t fmod, node.int_in("fmod", 0, 0, 1));
  (void)fmod;
  out.add_same(node);
  return Status::ok();
}

Status is_inf(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t neg, node.int_in("detect_negative", 1, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t pos, node.int_in("detect_positive", 1, 0, 1));
  (void)neg;
  (void)pos;
  return boolean_result(node, out);
}

}  // namespace

void register_onnx_elementwise_ops(OnnxTranslatorTable& table) {
  for (const char* op : {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin",
                         "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh",
                         "Erf", "Sigmoid", "Relu", "Softplus", "Softsign", "Elu", "Selu", "Celu", "LeakyRelu",
                         "HardSigmoid", "HardSwish", "ThresholdedRelu", "Shrink", "Not", "Identity", "Max", "Min",
                         "Sum", "Mean", "PRelu", "Where"}) {
    table[op] = translate_same;
  }
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) table[op] = binary;
  for (const char* op : {"And", "Or", "Xor", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsNaN"}) {
    table[op] = boolean_result;
  }
  table["IsInf"] = is_inf;
  table["Clip"] = clip;
  table["Cast"] = cast;
  table["CastLike"] = cast_like;
  table["BitShift"] = bit_shift;
  table["Mod"] = mod;
}

}  // namespace kiln::formats
