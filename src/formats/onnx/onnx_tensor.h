// Decoding ONNX TensorProto messages (initializers, Constant values, the conformance suite's
// input_N.pb / output_N.pb files) into ir::Tensor, including tensors whose bytes live in an
// external data file beside the model. Only the protobuf types of Debian's libonnx appear here
// and in the other onnx_*.cpp files; the rest of Kiln sees ir::Tensor and ir::Graph.
#pragma once

#include <string>

#include "base/status.h"
#include "ir/tensor.h"

namespace onnx {
class TensorProto;
}  // namespace onnx

namespace kiln::formats {

// The Kiln dtype of ONNX TensorProto.DataType `onnx_type`, or an error naming the type.
Expected<ir::DType> onnx_dtype(int onnx_type);
std::string onnx_dtype_name(int onnx_type);

// Decodes `proto`; external data is read relative to `base_dir` (paths must stay inside it).
Expected<ir::Tensor> onnx_tensor_decode(const onnx::TensorProto& proto, const std::string& base_dir);

// Reads a serialised TensorProto file (the conformance suite's *.pb).
Expected<ir::Tensor> onnx_tensor_read_file(const std::string& path);

}  // namespace kiln::formats
