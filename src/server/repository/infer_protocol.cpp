#include "server/repository/infer_protocol.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "base/half.h"
#include "server/repository/kserve_datatype.h"
#include "server/request_fields.h"

namespace kiln::server {
namespace {

using json = nlohmann::json;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Appends the leaves of a (possibly nested) JSON array, row-major.
bool flatten(const json& data, std::vector<const json*>& out, int depth) {
  if (!data.is_array()) {
    out.push_back(&data);
    return true;
  }
  if (depth > 32) return false;
  for (const json& e : data) {
    if (!flatten(e, out, depth + 1)) return false;
  }
  return true;
}

template <typename T>
bool store_integer(const json& v, std::byte* dst) {
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (x > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    const T t = static_cast<T>(x);
    std::memcpy(dst, &t, sizeof(T));
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (x < 0) return false;
    }
    if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (x > 0 && static_cast<uint64_t>(x) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      return false;
    }
    const T t = static_cast<T>(x);
    std::memcpy(dst, &t, sizeof(T));
    return true;
  }
  return false;
}

// One JSON element into `dst` as `dtype`; false when it is not a value of that type.
bool store_element(const json& v, ir::DType dtype, std::byte* dst) {
  switch (dtype) {
    case ir::DType::kBool: {
      if (!v.is_boolean()) return false;
      *reinterpret_cast<uint8_t*>(dst) = v.get<bool>() ? 1 : 0;
      return true;
    }
    case ir::DType::kU8: return store_integer<uint8_t>(v, dst);
    case ir::DType::kU16: return store_integer<uint16_t>(v, dst);
    case ir::DType::kU32: return store_integer<uint32_t>(v, dst);
    case ir::DType::kU64: return store_integer<uint64_t>(v, dst);
    case ir::DType::kI8: return store_integer<int8_t>(v, dst);
    case ir::DType::kI16: return store_integer<int16_t>(v, dst);
    case ir::DType::kI32: return store_integer<int32_t>(v, dst);
    case ir::DType::kI64: return store_integer<int64_t>(v, dst);
    default: break;
  }
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  switch (dtype) {
    case ir::DType::kF64: std::memcpy(dst, &d, 8); return true;
    case ir::DType::kF32: {
      const float f = static_cast<float>(d);
      std::memcpy(dst, &f, 4);
      return true;
    }
    case ir::DType::kF16: {
      const uint16_t h = float_to_fp16(static_cast<float>(d));
      std::memcpy(dst, &h, 2);
      return true;
    }
    case ir::DType::kBF16: {
      const uint16_t h = float_to_bf16(static_cast<float>(d));
      std::memcpy(dst, &h, 2);
      return true;
    }
    default: return false;
  }
}

json element_json(const std::byte* p, ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kBool: return *reinterpret_cast<const uint8_t*>(p) != 0;
    case ir::DType::kU8: return *reinterpret_cast<const uint8_t*>(p);
    case ir::DType::kU16: return *reinterpret_cast<const uint16_t*>(p);
    case ir::DType::kU32: return *reinterpret_cast<const uint32_t*>(p);
    case ir::DType::kU64: return *reinterpret_cast<const uint64_t*>(p);
    case ir::DType::kI8: return *reinterpret_cast<const int8_t*>(p);
    case ir::DType::kI16: return *reinterpret_cast<const int16_t*>(p);
    case ir::DType::kI32: return *reinterpret_cast<const int32_t*>(p);
    case ir::DType::kI64: return *reinterpret_cast<const int64_t*>(p);
    case ir::DType::kF64: return *reinterpret_cast<const double*>(p);
    case ir::DType::kF32: return *reinterpret_cast<const float*>(p);
    case ir::DType::kF16: return fp16_to_float(*reinterpret_cast<const uint16_t*>(p));
    case ir::DType::kBF16: return bf16_to_float(*reinterpret_cast<const uint16_t*>(p));
  }
  return nullptr;
}

// Checks a sent shape against the configured dims (and the batch dimension when batching).
std::optional<ApiError> check_shape(const std::string& field, const std::vector<int64_t>& shape, const ConfigTensor& spec,
                                    int64_t max_batch_size) {
  std::vector<int64_t> expected = spec.dims;
  if (max_batch_size > 0) expected.insert(expected.begin(), -1);
  bool ok = shape.size() == expected.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = expected[i] == -1 || expected[i] == shape[i];
  if (!ok) {
    return ApiError::bad_field(field, "input '" + spec.name + "' has shape " + shape_text(shape) + "; the model takes " +
                                          shape_text(expected) + " (-1: any size)");
  }
  if (max_batch_size > 0 && (shape[0] < 1 || shape[0] > max_batch_size)) {
    return ApiError::bad_field(field, "input '" + spec.name + "' has a batch of " + std::to_string(shape[0]) +
                                          "; this model takes 1 to " + std::to_string(max_batch_size));
  }
  return std::nullopt;
}

}  // namespace

ApiResult<const ConfigTensor*> infer_check_input(const ModelConfig& config, const std::string& field, const std::string& name,
                                                 const std::string& datatype, const std::vector<int64_t>& shape,
                                                 const std::map<std::string, ir::Tensor>& earlier) {
  const ConfigTensor* spec = nullptr;
  for (const ConfigTensor& t : config.inputs) {
    if (t.name == name) spec = &t;
  }
  if (spec == nullptr) {
    std::string names;
    for (const ConfigTensor& t : config.inputs) names += (names.empty() ? "'" : ", '") + t.name + "'";
    return ApiError::bad_field(field + ".name", "model '" + config.name + "' has no input '" + name + "' (its inputs: " + names + ")");
  }
  if (earlier.count(name)) return ApiError::bad_field(field + ".name", "input '" + name + "' is given twice");
  auto dtype = dtype_from_kserve(datatype);
  if (!dtype || *dtype != spec->dtype) {
    return ApiError::bad_field(field + ".datatype", "input '" + name + "' has datatype " + datatype + "; the model takes " +
                                                        kserve_datatype(spec->dtype));
  }
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > (int64_t{1} << 40)) return ApiError::bad_field(field + ".shape", "input '" + name + "': 'shape' must hold sizes >= 0");
    count = d == 0 ? 0 : (count > (int64_t{1} << 40) / d ? (int64_t{1} << 41) : count * d);
  }
  if (count > (int64_t{1} << 40)) return ApiError::bad_field(field + ".shape", "input '" + name + "' is too large");
  if (auto e = check_shape(field + ".shape", shape, *spec, config.max_batch_size)) return *e;
  return spec;
}

ApiResult<int64_t> infer_check_complete(const ModelConfig& config, const std::map<std::string, ir::Tensor>& inputs) {
  for (const ConfigTensor& t : config.inputs) {
    if (!inputs.count(t.name)) return ApiError::bad_field("inputs", "input '" + t.name + "' is missing");
  }
  if (config.max_batch_size == 0) return int64_t{1};
  std::optional<int64_t> batch;
  std::string first;
  for (const ConfigTensor& t : config.inputs) {
    const int64_t b = inputs.at(t.name).shape().at(0);
    if (batch && *batch != b) {
      return ApiError::bad_field("inputs", "input '" + t.name + "' has a batch of " + std::to_string(b) + "; input '" + first +
                                               "' has " + std::to_string(*batch));
    }
    batch = b;
    first = t.name;
  }
  return batch.value_or(1);
}

std::optional<ApiError> infer_check_output(const ModelConfig& config, const std::string& field, const std::string& name,
                                           const std::vector<InferOutputChoice>& earlier) {
  bool known = false;
  for (const ConfigTensor& t : config.outputs) known = known || t.name == name;
  if (!known) return ApiError::bad_field(field + ".name", "model '" + config.name + "' has no output '" + name + "'");
  for (const InferOutputChoice& c : earlier) {
    if (c.name == name) return ApiError::bad_field(field + ".name", "output '" + name + "' is asked twice");
  }
  return std::nullopt;
}

ApiResult<InferRequest> parse_infer_request(std::string_view body, std::optional<size_t> header_length,
                                            const ModelConfig& config) {
  std::string_view header = body, binary;
  if (header_length) {
    if (*header_length > body.size()) {
      return ApiError::bad_request("Inference-Header-Content-Length is " + std::to_string(*header_length) +
                                   " but the body has " + std::to_string(body.size()) + " bytes");
    }
    header = body.substr(0, *header_length);
    binary = body.substr(*header_length);
  }
  auto parsed = parse_json_object(std::string(header));
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  InferRequest req;
  if (j.contains("id")) {
    if (!j["id"].is_string()) return ApiError::bad_field("id", "'id' must be a string");
    req.id = j["id"].get<std::string>();
  }
  bool binary_default = false;
  if (j.contains("parameters")) {
    const json& p = j["parameters"];
    if (!p.is_object()) return ApiError::bad_field("parameters", "'parameters' must be an object");
    if (p.contains("binary_data_output")) {
      if (!p["binary_data_output"].is_boolean()) {
        return ApiError::bad_field("parameters.binary_data_output", "'binary_data_output' must be true or false");
      }
      binary_default = p["binary_data_output"].get<bool>();
    }
  }
  if (!j.contains("inputs") || !j["inputs"].is_array() || j["inputs"].empty()) {
    return ApiError::bad_field("inputs", "'inputs' must be a non-empty array of tensors");
  }
  size_t binary_used = 0;
  const json& inputs = j["inputs"];
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string field = "inputs[" + std::to_string(i) + "]";
    const json& in = inputs[i];
    if (!in.is_object()) return ApiError::bad_field(field, field + " must be an object");
    if (!in.contains("name") || !in["name"].is_string()) return ApiError::bad_field(field + ".name", field + " needs a string 'name'");
    const std::string name = in["name"].get<std::string>();
    if (!in.contains("datatype") || !in["datatype"].is_string()) {
      return ApiError::bad_field(field + ".datatype", "input '" + name + "' needs a string 'datatype' (e.g. \"FP32\")");
    }
    const std::string datatype = in["datatype"].get<std::string>();
    if (!in.contains("shape") || !in["shape"].is_array()) {
      return ApiError::bad_field(field + ".shape", "input '" + name + "' needs a 'shape' array");
    }
    std::vector<int64_t> shape;
    for (const json& d : in["shape"]) {
      if (!d.is_number_integer()) return ApiError::bad_field(field + ".shape", "input '" + name + "': 'shape' must hold sizes >= 0");
      shape.push_back(d.get<int64_t>());
    }
    auto checked = infer_check_input(config, field, name, datatype, shape, req.inputs);
    if (auto* e = std::get_if<ApiError>(&checked)) return *e;
    const ir::DType* dtype = &std::get<const ConfigTensor*>(checked)->dtype;
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    const size_t bytes = static_cast<size_t>(count) * ir::dtype_size(*dtype);
    ir::Tensor t(*dtype, shape);
    std::optional<size_t> binary_size;
    if (in.contains("parameters")) {
      const json& p = in["parameters"];
      if (!p.is_object()) return ApiError::bad_field(field + ".parameters", "input '" + name + "': 'parameters' must be an object");
      if (p.contains("binary_data_size")) {
        if (!p["binary_data_size"].is_number_unsigned()) {
          return ApiError::bad_field(field + ".parameters.binary_data_size",
                                     "input '" + name + "': 'binary_data_size' must be a size in bytes");
        }
        binary_size = p["binary_data_size"].get<size_t>();
      }
    }
    if (binary_size) {
      if (!header_length) {
        return ApiError::bad_field(field + ".parameters.binary_data_size",
                                   "input '" + name + "' is binary, but the request has no Inference-Header-Content-Length header");
      }
      if (*binary_size != bytes) {
        return ApiError::bad_field(field + ".parameters.binary_data_size",
                                   "input '" + name + "' of shape " + shape_text(shape) + " and datatype " + datatype + " is " +
                                       std::to_string(bytes) + " bytes; binary_data_size says " + std::to_string(*binary_size));
      }
      if (binary.size() - binary_used < bytes) {
        return ApiError::bad_field(field + ".parameters.binary_data_size",
                                   "the body ends before the " + std::to_string(bytes) + " bytes of input '" + name + "'");
      }
      if (bytes > 0) std::memcpy(t.mutable_bytes(), binary.data() + binary_used, bytes);
      binary_used += bytes;
    } else {
      if (!in.contains("data")) return ApiError::bad_field(field + ".data", "input '" + name + "' has no 'data'");
      std::vector<const json*> leaves;
      if (!flatten(in["data"], leaves, 0)) return ApiError::bad_field(field + ".data", "input '" + name + "': 'data' is nested too deeply");
      if (static_cast<int64_t>(leaves.size()) != count) {
        return ApiError::bad_field(field + ".data", "input '" + name + "' of shape " + shape_text(shape) + " needs " +
                                                        std::to_string(count) + " elements; 'data' has " + std::to_string(leaves.size()));
      }
      std::byte* dst = count > 0 ? t.mutable_bytes() : nullptr;
      const size_t esize = ir::dtype_size(*dtype);
      for (size_t e = 0; e < leaves.size(); ++e) {
        if (!store_element(*leaves[e], *dtype, dst + e * esize)) {
          return ApiError::bad_field(field + ".data", "input '" + name + "': element " + std::to_string(e) + " (" +
                                                          leaves[e]->dump() + ") is not a " + datatype + " value");
        }
      }
    }
    req.inputs.emplace(name, std::move(t));
  }
  if (binary_used != binary.size()) {
    return ApiError::bad_request("the body has " + std::to_string(binary.size() - binary_used) +
                                 " bytes after the inputs' binary data that no input claims");
  }
  auto batch = infer_check_complete(config, req.inputs);
  if (auto* e = std::get_if<ApiError>(&batch)) return *e;
  req.batch = std::get<int64_t>(batch);
  if (j.contains("outputs")) {
    const json& outs = j["outputs"];
    if (!outs.is_array()) return ApiError::bad_field("outputs", "'outputs' must be an array");
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::string field = "outputs[" + std::to_string(i) + "]";
      const json& o = outs[i];
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) {
        return ApiError::bad_field(field + ".name", field + " needs a string 'name'");
      }
      InferOutputChoice choice{o["name"].get<std::string>(), binary_default};
      if (auto e = infer_check_output(config, field, choice.name, req.outputs)) return *e;
      if (o.contains("parameters")) {
        const json& p = o["parameters"];
        if (!p.is_object()) return ApiError::bad_field(field + ".parameters", "'parameters' must be an object");
        if (p.contains("binary_data")) {
          if (!p["binary_data"].is_boolean()) return ApiError::bad_field(field + ".parameters.binary_data", "'binary_data' must be true or false");
          choice.binary = p["binary_data"].get<bool>();
        }
        if (p.contains("classification")) {
          return ApiError::bad_field(field + ".parameters.classification", "the classification extension is not supported");
        }
      }
      req.outputs.push_back(std::move(choice));
    }
  }
  if (req.outputs.empty()) {
    for (const ConfigTensor& t : config.outputs) req.outputs.push_back({t.name, binary_default});
  }
  return req;
}

HttpResponse infer_response(const InferRequest& request, const TensorList& outputs, const std::string& model,
                            const std::string& version) {
  json j = {{"model_name", model}, {"model_version", version}};
  if (!request.id.empty()) j["id"] = request.id;
  json outs = json::array();
  std::string blobs;
  for (const InferOutputChoice& choice : request.outputs) {
    const ir::Tensor* t = nullptr;
    for (const auto& [name, tensor] : outputs) {
      if (name == choice.name) t = &tensor;
    }
    if (t == nullptr) continue;
    json o = {{"name", choice.name}, {"datatype", kserve_datatype(t->dtype())}, {"shape", t->shape()}};
    if (choice.binary) {
      o["parameters"] = {{"binary_data_size", t->byte_size()}};
      blobs.append(reinterpret_cast<const char*>(t->bytes()), t->byte_size());
    } else {
      json data = json::array();
      const size_t esize = ir::dtype_size(t->dtype());
      for (int64_t i = 0; i < t->numel(); ++i) data.push_back(element_json(t->bytes() + i * esize, t->dtype()));
      o["data"] = std::move(data);
    }
    outs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outs);
  HttpResponse r;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!blobs.empty() || std::any_of(request.outputs.begin(), request.outputs.end(), [](const auto& c) { return c.binary; })) {
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.body.size()));
    r.content_type = "application/octet-stream";
    r.body += blobs;
  }
  return r;
}

}  // namespace kiln::server
