// ONNX signal-processing ops: HannWindow / HammingWindow / BlackmanWindow, DFT and STFT (opset
// 17, DFT's axis an attribute) and MelWeightMatrix. The translators check the attributes and fix
// the output dtypes ONNX defines: a window and the mel matrix take `output_datatype`, the
// transforms their input's.
#include "formats/onnx/onnx_tensor.h"
#include "formats/onnx/onnx_translate.h"

namespace kiln::formats {
namespace {

// The output type an `output_datatype` attribute names (float by default).
Expected<ir::DType> output_datatype(const OnnxNode& node) {
  auto dtype = onnx_dtype(static_cast<int>(node.attr_int("output_datatype", 1)));
  if (!dtype) return node.error(dtype.status().message());
  if (!ir::dtype_is_float(*dtype) && *dtype != ir::DType::kI64 && *dtype != ir::DType::kI32) {
    return node.error("output_datatype must be a float or integer type");
  }
  return *dtype;
}

Status window(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t periodic, node.int_in("periodic", 1, 0, 1));
  KILN_ASSIGN_OR_RETURN(ir::DType dtype, output_datatype(node));
  out.graph().value(node.outputs[0]).dtype = dtype;
  out.add(node.op_type, node.name, node.inputs, node.outputs,
          {{"periodic", periodic}, {"dtype", std::string(ir::dtype_name(dtype))}});
  return Status::ok();
}

Status dft(const OnnxNode& node, OnnxEmitter& out) {
  if (node.opset >= 20) return node.error("opset 20's DFT (axis as an input) is not supported");
  KILN_ASSIGN_OR_RETURN(int64_t inverse, node.int_in("inverse", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t onesided, node.int_in("onesided", 0, 0, 1));
  KILN_ASSIGN_OR_RETURN(int64_t axis, node.int_in("axis", 1, -(int64_t{1} << 20), int64_t{1} << 20));
  out.graph().value(node.outputs[0]).dtype = out.graph().value(node.input(0)).dtype;
  out.add("DFT", node.name, node.inputs, node.outputs, {{"inverse", inverse}, {"onesided", onesided}, {"axis", axis}});
  return Status::ok();
}

Status stft(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(int64_t onesided, node.int_in("onesided", 1, 0, 1));
  out.graph().value(node.outputs[0]).dtype = out.graph().value(node.input(0)).dtype;
  out.add("STFT", node.name, node.inputs, node.outputs, {{"onesided", onesided}});
  return Status::ok();
}

Status mel_weight_matrix(const OnnxNode& node, OnnxEmitter& out) {
  KILN_ASSIGN_OR_RETURN(ir::DType dtype, output_datatype(node));
  out.graph().value(node.outputs[0]).dtype = dtype;
  out.add("MelWeightMatrix", node.name, node.inputs, node.outputs, {{"dtype", std::string(ir::dtype_name(dtype))}});
  return Status::ok();
}

}  // namespace

void register_onnx_signal_ops(OnnxTranslatorTable& table) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) table[op] = window;
  table["DFT"] = dft;
  table["STFT"] = stft;
  table["MelWeightMatrix"] = mel_weight_matrix;
}

}  // namespace kiln::formats
