#include "formats/onnx/onnx_tensor.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace kiln::formats {
namespace {

using onnx::TensorProto;

template <typename Field>
void fill_from(ir::Tensor& t, const Field& field, bool as_float) {
  for (int i = 0; i < field.size(); ++i) {
    if (as_float) {
      ir::tensor_set_f64(t, i, static_cast<double>(field.Get(i)));
    } else {
      ir::tensor_set_i64(t, i, static_cast<int64_t>(field.Get(i)));
    }
  }
}

Expected<std::string> read_external(const TensorProto& proto, const std::string& base_dir, size_t want) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      return invalid_argument("tensor '" + proto.name() + "': external_data " + kv.key() + " is not a number");
    }
  }
  if (location.empty()) return invalid_argument("tensor '" + proto.name() + "': external data without a location");
  if (location.front() == '/' || location.find("..") != std::string::npos) {
    return invalid_argument("tensor '" + proto.name() + "': external data location '" + location +
                            "' must be a relative path inside the model's directory");
  }
  if (offset < 0 || (length >= 0 && static_cast<size_t>(length) != want)) {
    return invalid_argument("tensor '" + proto.name() + "': external data offset/length do not fit its shape");
  }
  const std::string path = base_dir + "/" + location;
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("tensor '" + proto.name() + "': cannot open external data file " + path);
  f.seekg(0, std::ios::end);
  const auto file_size = static_cast<int64_t>(f.tellg());
  if (file_size < 0 || static_cast<uint64_t>(offset) > static_cast<uint64_t>(file_size) ||
      want > static_cast<uint64_t>(file_size - offset)) {
    return invalid_argument("tensor '" + proto.name() + "': external data file " + path + " holds " +
                            std::to_string(file_size) + " bytes, too few for " + std::to_string(want) +
                            " bytes at offset " + std::to_string(offset));
  }
  f.seekg(offset);
  std::string bytes(want, '\0');
  f.read(bytes.data(), static_cast<std::streamsize>(want));
  if (static_cast<size_t>(f.gcount()) != want) {
    return invalid_argument("tensor '" + proto.name() + "': external data file " + path + " is truncated");
  }
  return bytes;
}

}  // namespace

Expected<ir::DType> onnx_dtype(int onnx_type) {
  switch (onnx_type) {
    case TensorProto::FLOAT: return ir::DType::kF32;
    case TensorProto::DOUBLE: return ir::DType::kF64;
    case TensorProto::FLOAT16: return ir::DType::kF16;
    case TensorProto::BFLOAT16: return ir::DType::kBF16;
    case TensorProto::INT8: return ir::DType::kI8;
    case TensorProto::UINT8: return ir::DType::kU8;
    case TensorProto::INT16: return ir::DType::kI16;
    case TensorProto::UINT16: return ir::DType::kU16;
    case TensorProto::INT32: return ir::DType::kI32;
    case TensorProto::UINT32: return ir::DType::kU32;
    case TensorProto::INT64: return ir::DType::kI64;
    case TensorProto::UINT64: return ir::DType::kU64;
    case TensorProto::BOOL: return ir::DType::kBool;
    default: return unimplemented("unsupported dtype " + onnx_dtype_name(onnx_type));
  }
}

std::string onnx_dtype_name(int onnx_type) {
  if (TensorProto::DataType_IsValid(onnx_type)) {
    return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(onnx_type));
  }
  return "data type " + std::to_string(onnx_type);
}

Expected<ir::Tensor> onnx_tensor_decode(const TensorProto& proto, const std::string& base_dir) {
  KILN_ASSIGN_OR_RETURN(ir::DType dtype, onnx_dtype(proto.data_type()));
  ir::Shape shape(proto.dims().begin(), proto.dims().end());
  // The element count, bounded before anything is allocated: a file's dims are not trusted.
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("tensor '" + proto.name() + "' has a negative dimension");
    if (d == 0) numel = 0;
  }
  for (int64_t d : shape) {
    if (numel == 0) break;
    if (d > kMaxElements / numel) {
      return invalid_argument("tensor '" + proto.name() + "' has shape " + ir::shape_to_string(shape) +
                              ", more than 2^40 elements");
    }
    numel *= d;
  }
  if (proto.has_segment()) return unimplemented("tensor '" + proto.name() + "' is segmented");
  const size_t want = static_cast<size_t>(numel) * ir::dtype_size(dtype);
  if (proto.data_location() == TensorProto::EXTERNAL) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, read_external(proto, base_dir, want));
    ir::Tensor t(dtype, shape);
    if (want) std::memcpy(t.mutable_bytes(), bytes.data(), want);
    return t;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != want) {
      return invalid_argument("tensor '" + proto.name() + "' holds " + std::to_string(proto.raw_data().size()) +
                              " bytes of raw data, its shape " + ir::shape_to_string(shape) + " needs " +
                              std::to_string(want));
    }
    ir::Tensor t(dtype, shape);
    if (want) std::memcpy(t.mutable_bytes(), proto.raw_data().data(), want);
    return t;
  }
  int64_t got = 0;
  switch (dtype) {
    case ir::DType::kF32: got = proto.float_data_size(); break;
    case ir::DType::kF64: got = proto.double_data_size(); break;
    case ir::DType::kI64: got = proto.int64_data_size(); break;
    case ir::DType::kU32:
    case ir::DType::kU64: got = proto.uint64_data_size(); break;
    default: got = proto.int32_data_size(); break;  // f16 / bf16 keep their 16-bit patterns here
  }
  if (got != numel) {
    return invalid_argument("tensor '" + proto.name() + "' holds " + std::to_string(got) + " values, its shape " +
                            ir::shape_to_string(shape) + " needs " + std::to_string(numel));
  }
  ir::Tensor t(dtype, shape);
  switch (dtype) {
    case ir::DType::kF32: fill_from(t, proto.float_data(), true); break;
    case ir::DType::kF64: fill_from(t, proto.double_data(), true); break;
    case ir::DType::kI64: fill_from(t, proto.int64_data(), false); break;
    case ir::DType::kU32:
    case ir::DType::kU64: fill_from(t, proto.uint64_data(), false); break;
    case ir::DType::kF16:
    case ir::DType::kBF16: {
      auto* p = t.mutable_data<uint16_t>();
      for (int64_t i = 0; i < numel; ++i) p[i] = static_cast<uint16_t>(proto.int32_data(static_cast<int>(i)));
      break;
    }
    default: fill_from(t, proto.int32_data(), false); break;
  }
  return t;
}

Expected<ir::Tensor> onnx_tensor_read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  TensorProto proto;
  if (!proto.ParseFromString(bytes)) return invalid_argument(path + " is not a serialised ONNX tensor");
  const size_t slash = path.rfind('/');
  return onnx_tensor_decode(proto, slash == std::string::npos ? "." : path.substr(0, slash));
}

}  // namespace kiln::formats
