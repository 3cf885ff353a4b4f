// ONNX linear quantisation ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear. The
// translators fix the output dtypes ONNX defines (codes take the zero point's dtype, u8 without
// one; dequantised values take the scale's) and check the attributes.
#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

Status quantize(const OnnxNode& node, OnnxEmitter& out) {
  ir::Graph& g = out.graph();
  if (node.input(1) == ir::kNoValue) return node.error("the scale input is missing");
  if (node.op_type == "QuantizeLinear") {
    const ir::DType dtype = node.input(2) != ir::kNoValue ? g.value(node.input(2)).dtype : ir::DType::kU8;
    if (dtype != ir::DType::kU8 && dtype != ir::DType::kI8) return node.error("the zero point must be u8 or i8");
    g.value(node.outputs[0]).dtype = dtype;
  } else {
    g.value(node.outputs[0]).dtype = g.value(node.input(1)).dtype;
  }
  out.add(node.op_type, node.name, node.inputs, node.outputs, {{"axis", node.attr_int("axis", 1)}});
  return Status::ok();
}

Status dynamic_quantize(const OnnxNode& node, OnnxEmitter& out) {
  ir::Graph& g = out.graph();
  if (node.outputs.size() != 3) return node.error("expected 3 outputs (y, y_scale, y_zero_point)");
  g.value(node.outputs[0]).dtype = ir::DType::kU8;
  g.value(node.outputs[1]).dtype = ir::DType::kF32;
  g.value(node.outputs[2]).dtype = ir::DType::kU8;
  out.add_same(node);
  return Status::ok();
}

}  // namespace

void register_onnx_quantize_ops(OnnxTranslatorTable& table) {
  table["QuantizeLinear"] = quantize;
  table["DequantizeLinear"] = quantize;
  table["DynamicQuantizeLinear"] = dynamic_quantize;
}

}  // namespace kiln::formats
