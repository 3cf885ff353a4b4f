// ONNX data-movement ops: Constant, Reshape, Flatten, Transpose, Squeeze / Unsqueeze, Concat,
// Split, Slice, Gather*, Expand, Tile, Shape, Size, ConstantOfShape, Range, Pad, Trilu, OneHot,
// DepthToSpace / SpaceToDepth, EyeLike, NonZero, Dropout (inference: a copy and an all-true mask),
// ScatterElements / ScatterND (Scatter, opsets 9-10, is ScatterElements), Compress, Unique
// (indices, inverse indices and counts are i64), Einsum.
// Opset rewrites into the latest form:
//   Constant                      -> a weight, copied to the output by Identity.
//   Reshape (< 5) shape attribute, Squeeze / Unsqueeze (< 13) axes, Split (< 13) split,
//   Slice (< 10) starts / ends / axes, Pad (< 11) pads / value  -> constant inputs.
//   ConstantOfShape value tensor  -> attributes value (double) and dtype.
#include <cstring>

#include "formats/onnx/onnx_tensor.h"
#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

const std::vector<int64_t>* ints(const OnnxNode& node, const std::string& key) {
  auto it = node.attrs.find(key);
  return it == node.attrs.end() ? nullptr : std::get_if<std::vector<int64_t>>(&it->second);
}

Status constant(const OnnxNode& node, OnnxEmitter& out) {
  ir::Tensor t;
  if (auto it = node.tensor_attrs.find("value"); it != node.tensor_attrs.end()) {
    t = it->second;
  } else if (node.attrs.count("value_float")) {
    t = ir::Tensor(ir::DType::kF32, {});
    KILN_ASSIGN_OR_RETURN(double value, node.float_in("value_float", 0.0));
    t.mutable_data<float>()[0] = static_cast<float>(value);
  } else if (node.attrs.count("value_int")) {
    t = ir::Tensor(ir::DType::kI64, {});
    t.mutable_data<int64_t>()[0] = node.attr_int("value_int", 0);
  } else if (const auto* v = ints(node, "value_ints")) {
    t = ir::Tensor(ir::DType::kI64, {static_cast<int64_t>(v->size())});
    if (!v->empty()) std::memcpy(t.mutable_bytes(), v->data(), v->size() * 8);
  } else if (node.attrs.count("value_floats")) {
    KILN_ASSIGN_OR_RETURN(std::vector<double> floats, node.floats_in("value_floats"));
    t = ir::Tensor(ir::DType::kF32, {static_cast<int64_t>(floats.size())});
    for (size_t i = 0; i < floats.size(); ++i) t.mutable_data<float>()[i] = static_cast<float>(floats[i]);
  } else {
    return node.error("only tensor, float(s) and int(s) values are supported");
  }
  ir::Value& o = out.graph().value(node.outputs[0]);
  o.dtype = t.dtype();
  o.shape = t.shape();
  o.shape_known = true;
  out.add("Identity", node.name, {out.constant(node, "value", std::move(t))}, node.outputs, {});
  return Status::ok();
}

// `key`'s int list attribute as a constant input in place of input `index` (older opsets).
Status attr_to_input(const OnnxNode& node, OnnxEmitter& out, const std::string& key, size_t index,
                     std::map<std::string, ir::Attr> attrs) {
  std::vector<ir::ValueId> inputs = node.inputs;
  if (const auto* v = ints(node, key)) {
    inputs.resize(std::max(inputs.size(), index + 1), ir::kNoValue);
    inputs[index] = out.constant_i64(node, key, *v);
  }
  out.add(node.op_type, node.name, inputs, node.outputs, std::move(attrs));
  return Status::ok();
}

Status reshape(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t allowzero, node.int_in("allowzero", 0, 0, 1));
  return attr_to_input(node, out, "shape", 1, {{"allowzero", allowzero}});
}

Status squeeze(const OnnxNode& node, OnnxEmitter& out) { return attr_to_input(node, out, "axes", 1, {}); }

Status split(const OnnxNode& node, OnnxEmitter& out) {
  std::map<std::string, ir::Attr> attrs = {{"axis", node.attr_int("axis", 0)}};
  if (node.has("num_outputs")) attrs["num_outputs"] = node.attr_int("num_outputs", 0);
  return attr_to_input(node, out, "split", 1, attrs);
}

Status slice(const OnnxNode& node, OnnxEmitter& out) {
  if (node.opset >= 10) return translate_same(node, out);
  const auto* starts = ints(node, "starts");
  const auto* ends = ints(node, "ends");
  if (starts == nullptr || ends == nullptr) return node.error("attributes 'starts' and 'ends' are required");
  std::vector<ir::ValueId> inputs = {node.input(0), out.constant_i64(node, "starts", *starts),
                                     out.constant_i64(node, "ends", *ends)};
  if (const auto* axes = ints(node, "axes")) inputs.push_back(out.constant_i64(node, "axes", *axes));
  out.add("Slice", node.name, inputs, node.outputs, {});
  return Status::ok();
}

Status pad(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string mode, node.string_in("mode", "constant", {"constant", "reflect", "edge", "wrap"}));
  std::vector<ir::ValueId> inputs = node.inputs;
  if (node.opset < 11) {
    const auto* pads = ints(node, "pads");
    if (pads == nullptr) return node.error("attribute 'pads' is required");
    ir::Tensor value(out.graph().value(node.input(0)).dtype, {});
    KILN_ASSIGN_OR_RETURN(double fill, node.float_in("value", 0.0));
    ir::tensor_set_f64(value, 0, fill);
    inputs = {node.input(0), out.constant_i64(node, "pads", *pads), out.constant(node, "value", value)};
  }
  out.add("Pad", node.name, inputs, node.outputs, {{"mode", mode}});
  return Status::ok();
}

Status constant_of_shape(const OnnxNode& node, OnnxEmitter& out) {
  double value = 0.0;
  ir::DType dtype = ir::DType::kF32;
  if (auto it = node.tensor_attrs.find("value"); it != node.tensor_attrs.end()) {
    if (it->second.numel() != 1) return node.error("attribute 'value' must hold one element");
    dtype = it->second.dtype();
    value = ir::tensor_get_f64(it->second, 0);
  }
  out.graph().value(node.outputs[0]).dtype = dtype;
  out.add("ConstantOfShape", node.name, node.inputs, node.outputs,
          {{"value", value}, {"dtype", std::string(ir::dtype_name(dtype))}});
  return Status::ok();
}

Status int_result(const OnnxNode& node, OnnxEmitter& out) {
  out.graph().value(node.outputs[0]).dtype = ir::DType::kI64;
  out.add_same(node);
  return Status::ok();
}

Status eye_like(const OnnxNode& node, OnnxEmitter& out) {
  ir::DType dtype = out.graph().value(node.input(0)).dtype;
  if (node.has("dtype")) {
    auto d = onnx_dtype(static_cast<int>(node.attr_int("dtype", 1)));
    if (!d) return node.error(d.status().message());
    dtype = *d;
  }
  out.graph().value(node.outputs[0]).dtype = dtype;
  out.add("EyeLike", node.name, node.inputs, node.outputs,
          {{"k", node.attr_int("k", 0)}, {"dtype", std::string(ir::dtype_name(dtype))}});
  return Status::ok();
}

Status depth_to_space(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string mode, node.string_in("mode", "DCR", {"DCR", "CRD"}));
  KILN_ASSIGN_OR_RETURN(int64_t block, node.int_in("blocksize", 0, 1, 1 << 16));
  out.add(node.op_type, node.name, node.inputs, node.outputs, {{"mode", mode}, {"blocksize", block}});
  return Status::ok();
}

Status dropout(const OnnxNode& node, OnnxEmitter& out) {
  if (node.opset < 7 && node.attr_int("is_test", 0) == 0) {
    return node.error("training-mode Dropout (is_test = 0) is not supported");
  }
  if (node.outputs.size() > 1) out.graph().value(node.outputs[1]).dtype = ir::DType::kBool;
  std::vector<ir::ValueId> inputs = {node.input(0)};
  if (node.opset >= 12) inputs = node.inputs;
  out.add("Dropout", node.name, inputs, node.outputs, {});
  return Status::ok();
}

Status scatter(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string reduction, node.string_in("reduction", "none", {"none", "add", "mul", "max", "min"}));
  std::map<std::string, ir::Attr> attrs = {{"reduction", reduction}};
  if (node.op_type != "ScatterND") attrs["axis"] = node.attr_int("axis", 0);
  out.add(node.op_type == "ScatterND" ? "ScatterND" : "ScatterElements", node.name, node.inputs, node.outputs, attrs);
  return Status::ok();
}

Status unique(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t sorted, node.int_in("sorted", 1, 0, 1));
  for (size_t i = 1; i < node.outputs.size(); ++i) out.graph().value(node.outputs[i]).dtype = ir::DType::kI64;
  std::map<std::string, ir::Attr> attrs = {{"sorted", sorted}};
  if (node.attrs.count("axis")) attrs["axis"] = node.attr_int("axis", 0);
  out.add("Unique", node.name, node.inputs, node.outputs, attrs);
  return Status::ok();
}

Status einsum(const OnnxNode& node, OnnxEmitter& out) {
  auto it = node.attrs.find("equation");
  const auto* equation = it == node.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
  if (equation == nullptr || equation->empty()) return node.error("attribute 'equation' (a string) is required");
  out.add("Einsum", node.name, node.inputs, node.outputs, {{"equation", *equation}});
  return Status::ok();
}

}  // namespace

void register_onnx_tensor_ops(OnnxTranslatorTable& table) {
  for (const char* op : {"Flatten", "Transpose", "Concat", "Gather", "GatherElements", "GatherND", "Expand", "Tile",
                         "Range", "Trilu", "OneHot"}) {
    table[op] = translate_same;
  }
  table["Constant"] = constant;
  table["Reshape"] = reshape;
  table["Squeeze"] = squeeze;
  table["Unsqueeze"] = squeeze;
  table["Split"] = split;
  table["Slice"] = slice;
  table["Pad"] = pad;
  table["ConstantOfShape"] = constant_of_shape;
  table["Shape"] = int_result;
  table["Size"] = int_result;
  table["NonZero"] = int_result;
  table["EyeLike"] = eye_like;
  table["DepthToSpace"] = depth_to_space;
  table["SpaceToDepth"] = depth_to_space;
  table["Dropout"] = dropout;
  table["Scatter"] = scatter;
  table["ScatterElements"] = scatter;
  table["ScatterND"] = scatter;
  table["Compress"] = translate_same;
  table["Unique"] = unique;
  table["Einsum"] = einsum;
}

}  // namespace kiln::formats
