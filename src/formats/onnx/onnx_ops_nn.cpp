// ONNX neural-network ops: MatMul, Gemm, Conv, ConvTranspose, MaxPool, AveragePool, MaxUnpool,
// the global pools, and the normalisations (BatchNormalization in inference mode,
// InstanceNormalization, LayerNormalization, LRN, MeanVarianceNormalization), Det, GridSample
// (4-D), RoiAlign, NonMaxSuppression, ConvInteger / MatMulInteger (i32 results), QLinearConv /
// QLinearMatMul (u8 or i8 codes), and Resize (Upsample and opset-10 Resize become Resize with
// asymmetric coordinates and floor rounding).
// Attributes are checked here, once, so that a kernel can trust them: transA/transB, ceil_mode,
// count_include_pad and friends are 0 or 1, auto_pad is one of ONNX's four values, group divides
// nothing it should not.
#include <cmath>

#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

Status gemm(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t ta, node.int_in("transA", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t tb, node.int_in("transB", 0, 0, 1));
  std::map<std::string, ir::Attr> attrs = {{"transA", ta}, {"transB", tb}};
  if (node.attrs.count("alpha")) attrs["alpha"] = node.attrs.at("alpha");
  if (node.attrs.count("beta")) attrs["beta"] = node.attrs.at("beta");
  out.add("Gemm", node.name, node.inputs, node.outputs, attrs);
  return Status::ok();
}

Status conv_like(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string pad, node.string_in("auto_pad", "NOTSET", {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}));
  KILN_ASSIGN_OR_RETURN(int64_t group, node.int_in("group", 1, 1, 1 << 20));
  KILN_ASSIGN_OR_RETURN(int64_t ceil, node.int_in("ceil_mode", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t include, node.int_in("count_include_pad", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t order, node.int_in("storage_order", 0, 0, 1));
  (void)pad, (void)group, (void)ceil, (void)include, (void)order;
  for (const char* key : {"strides", "dilations"}) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> values, node.ints_in(key));
    for (int64_t v : values) {
      if (v < 1) return node.error(std::string("attribute '") + key + "' must be positive");
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pads, node.ints_in("pads"));
  for (int64_t v : pads) {
    if (v < 0) return node.error("attribute 'pads' must not be negative");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, node.ints_in("kernel_shape"));
  (void)kernel;
  if (node.op_type == "MaxPool" && node.outputs.size() > 1) out.graph().value(node.outputs[1]).dtype = ir::DType::kI64;
  out.add_same(node);
  return Status::ok();
}

// MaxUnpool: Conv's attribute checks, and kernel_shape required and positive (the kernel sizes
// the output from output_shape or from these attributes).
Status max_unpool(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, node.ints_in("kernel_shape"));
  if (kernel.empty()) return node.error("attribute 'kernel_shape' is required");
  for (int64_t v : kernel) {
    if (v < 1) return node.error("attribute 'kernel_shape' must be positive");
  }
  return conv_like(node, out);
}

Status batch_norm(const OnnxNode& node, OnnxEmitter& out) {
  if (node.attr_int("training_mode", 0) != 0 || node.outputs.size() > 1) {
    return node.error("training mode (running statistics outputs) is not supported");
  }
  if (node.attr_int("spatial", 1) != 1) return node.error("spatial = 0 is not supported");
  out.add("BatchNormalization", node.name, node.inputs, node.outputs,
          {{"epsilon", node.attrs.count("epsilon") ? node.attrs.at("epsilon") : ir::Attr{1e-5}}});
  return Status::ok();
}

Status layer_norm(const OnnxNode& node, OnnxEmitter& out) {
  std::map<std::string, ir::Attr> attrs = {{"axis", node.attr_int("axis", -1)},
                                           {"epsilon", node.attrs.count("epsilon") ? node.attrs.at("epsilon") : ir::Attr{1e-5}}};
  for (size_t i = 1; i < node.outputs.size(); ++i) out.graph().value(node.outputs[i]).dtype = ir::DType::kF32;
  out.add("LayerNormalization", node.name, node.inputs, node.outputs, attrs);
  return Status::ok();
}

Status resize(const OnnxNode& node, OnnxEmitter& out) {
  const bool legacy = node.op_type == "Upsample" || node.opset < 11;
  std::vector<std::string> modes = {"nearest", "linear"};
  if (!legacy) modes.push_back("cubic");
  KILN_ASSIGN_OR_RETURN(std::string mode, node.string_in("mode", "nearest", modes));
  std::map<std::string, ir::Attr> attrs = {{"mode", mode}};
  std::vector<ir::ValueId> inputs = {node.input(0), ir::kNoValue, node.input(1)};
  if (legacy) {
    attrs["coordinate_transformation_mode"] = std::string("asymmetric");
    attrs["nearest_mode"] = std::string("floor");
    if (node.op_type == "Upsample" && node.opset < 9) {
      KILN_ASSIGN_OR_RETURN(std::vector<double> scales, node.floats_in("scales"));
      if (scales.empty()) return node.error("attribute 'scales' is required");
      ir::Tensor t(ir::DType::kF32, {static_cast<int64_t>(scales.size())});
      for (size_t i = 0; i < scales.size(); ++i) t.mutable_data<float>()[i] = static_cast<float>(scales[i]);
      inputs[2] = out.constant(node, "scales", std::move(t));
    }
    out.add("Resize", node.name, inputs, node.outputs, attrs);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(std::string coord, node.string_in("coordinate_transformation_mode", "half_pixel",
                                                          {"half_pixel", "pytorch_half_pixel", "align_corners",
                                                           "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"}));
  KILN_ASSIGN_OR_RETURN(std::string nearest, node.string_in("nearest_mode", "round_prefer_floor",
                                                            {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}));
  KILN_ASSIGN_OR_RETURN(int64_t exclude, node.int_in("exclude_outside", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t antialias, node.int_in("antialias", 0, 0, 0));
  KILN_ASSIGN_OR_RETURN(std::string policy, node.string_in("keep_aspect_ratio_policy", "stretch", {"stretch"}));
  (void)antialias, (void)policy;
  if (node.has("axes")) return node.error("attribute 'axes' is not supported");
  attrs["coordinate_transformation_mode"] = coord;
  attrs["nearest_mode"] = nearest;
  attrs["exclude_outside"] = exclude;
  KILN_ASSIGN_OR_RETURN(double cubic_a, node.float_in("cubic_coeff_a", -0.75));
  KILN_ASSIGN_OR_RETURN(double extrapolation, node.float_in("extrapolation_value", 0.0));
  attrs["cubic_coeff_a"] = cubic_a;
  attrs["extrapolation_value"] = extrapolation;
  out.add("Resize", node.name, node.inputs, node.outputs, attrs);
  return Status::ok();
}

Status grid_sample(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string mode, node.string_in("mode", "bilinear", {"bilinear", "nearest", "bicubic"}));
  KILN_ASSIGN_OR_RETURN(std::string pad, node.string_in("padding_mode", "zeros", {"zeros", "border", "reflection"}));
  KILN_ASSIGN_OR_RETURN(int64_t corners, node.int_in("align_corners", 0, 0, 1));
  out.add("GridSample", node.name, node.inputs, node.outputs,
          {{"mode", mode}, {"padding_mode", pad}, {"align_corners", corners}});
  return Status::ok();
}

// RoiAlign: opset 10 has no coordinate_transformation_mode and behaves as output_half_pixel;
// from opset 16 it defaults to half_pixel. Output sizes and the sampling ratio are checked here.
Status roi_align(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(std::string mode, node.string_in("mode", "avg", {"avg", "max"}));
  std::string coord = "output_half_pixel";
  if (node.opset >= 16) {
    KILN_ASSIGN_OR_RETURN(coord, node.string_in("coordinate_transformation_mode", "half_pixel",
                                                {"half_pixel", "output_half_pixel"}));
  }
  constexpr int64_t kMaxSide = int64_t{1} << 20;
  KILN_ASSIGN_OR_RETURN(int64_t oh, node.int_in("output_height", 1, 1, kMaxSide));
  KILN_ASSIGN_OR_RETURN(int64_t ow, node.int_in("output_width", 1, 1, kMaxSide));
  KILN_ASSIGN_OR_RETURN(int64_t ratio, node.int_in("sampling_ratio", 0, 0, kMaxSide));
  KILN_ASSIGN_OR_RETURN(double scale, node.float_in("spatial_scale", 1.0));
  if (!(scale > 0.0) || !std::isfinite(scale)) return node.error("attribute 'spatial_scale' must be positive");
  out.add("RoiAlign", node.name, node.inputs, node.outputs,
          {{"mode", mode},
           {"coordinate_transformation_mode", coord},
           {"output_height", oh},
           {"output_width", ow},
           {"sampling_ratio", ratio},
           {"spatial_scale", scale}});
  return Status::ok();
}

Status non_max_suppression(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t center, node.int_in("center_point_box", 0, 0, 1));
  out.graph().value(node.outputs[0]).dtype = ir::DType::kI64;
  out.add("NonMaxSuppression", node.name, node.inputs, node.outputs, {{"center_point_box", center}});
  return Status::ok();
}

// ONNX's MatMul has two inputs; Kiln's may carry a third only when the build fuses a bias.
Status matmul(const OnnxNode& node, OnnxEmitter& out) {
  if (node.inputs.size() != 2) return node.error("expected 2 inputs, got " + std::to_string(node.inputs.size()));
  out.add_same(node);
  return Status::ok();
}

Status integer_product(const OnnxNode& node, OnnxEmitter& out) {
  out.graph().value(node.outputs[0]).dtype = ir::DType::kI32;
  if (node.op_type == "ConvInteger") return conv_like(node, out);
  out.add_same(node);
  return Status::ok();
}

// QLinearMatMul and QLinearConv: eight inputs (QLinearConv may add B); the codes take
// y_zero_point's dtype (u8 or i8).
Status qlinear_codes(const OnnxNode& node, OnnxEmitter& out) {
  const size_t most = node.op_type == "QLinearConv" ? 9 : 8;
  if (node.inputs.size() < 8 || node.inputs.size() > most) {
    return node.error(std::string("expected ") + (most == 9 ? "8 or 9" : "8") + " inputs, got " +
                      std::to_string(node.inputs.size()));
  }
  for (size_t i = 0; i < 8; ++i) {
    if (node.input(i) == ir::kNoValue) return node.error("input " + std::to_string(i) + " is missing");
  }
  const ir::DType dtype = out.graph().value(node.input(7)).dtype;
  if (dtype != ir::DType::kU8 && dtype != ir::DType::kI8) return node.error("y_zero_point must be u8 or i8");
  out.graph().value(node.outputs[0]).dtype = dtype;
  if (node.op_type == "QLinearConv") return conv_like(node, out);
  out.add_same(node);
  return Status::ok();
}

}  // namespace

void register_onnx_nn_ops(OnnxTranslatorTable& table) {
  table["MatMul"] = matmul;
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization", "LRN",
                         "MeanVarianceNormalization", "Det"}) {
    table[op] = translate_same;
  }
  table["Gemm"] = gemm;
  for (const char* op : {"Conv", "ConvTranspose", "MaxPool", "AveragePool"}) table[op] = conv_like;
  table["MaxUnpool"] = max_unpool;
  table["BatchNormalization"] = batch_norm;
  table["LayerNormalization"] = layer_norm;
  table["Resize"] = resize;
  table["Upsample"] = resize;
  table["GridSample"] = grid_sample;
  table["RoiAlign"] = roi_align;
  table["NonMaxSuppression"] = non_max_suppression;
  table["ConvInteger"] = integer_product;
  table["QLinearConv"] = qlinear_codes;
  table["QLinearMatMul"] = qlinear_codes;
  table["MatMulInteger"] = integer_product;
}

}  // namespace kiln::formats
