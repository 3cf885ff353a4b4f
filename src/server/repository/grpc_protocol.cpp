#include "server/repository/grpc_protocol.h"

#include <cstring>
#include <limits>
#include <utility>

#include "server/repository/kserve_datatype.h"

namespace kiln::server {
namespace {

// Copies typed contents into `t`, checking the count and each value's range.
template <typename Dst, typename Src>
std::optional<ApiError> store_contents(const Src& values, ir::Tensor& t, const std::string& field, const std::string& name,
                                       const char* contents_field) {
  if (static_cast<int64_t>(values.size()) != t.numel()) {
    return ApiError::bad_field(field + ".contents", "input '" + name + "' needs " + std::to_string(t.numel()) + " values; " +
                                                        contents_field + " has " + std::to_string(values.size()));
  }
  Dst* out = t.numel() > 0 ? t.mutable_data<Dst>() : nullptr;
  for (int i = 0; i < values.size(); ++i) {
    const auto v = values.Get(i);
    if constexpr (std::is_integral_v<Dst> && !std::is_same_v<std::decay_t<decltype(v)>, bool>) {
      if (!std::in_range<Dst>(v)) {
        return ApiError::bad_field(field + ".contents", "input '" + name + "': " + contents_field + "[" + std::to_string(i) +
                                                            "] = " + std::to_string(v) + " is out of range");
      }
    }
    out[i] = static_cast<Dst>(v);
  }
  return std::nullopt;
}

std::optional<ApiError> read_contents(const inference::InferTensorContents& c, ir::Tensor& t, const std::string& field,
                                      const std::string& name) {
  switch (t.dtype()) {
    case ir::DType::kF32: return store_contents<float>(c.fp32_contents(), t, field, name, "fp32_contents");
    case ir::DType::kF64: return store_contents<double>(c.fp64_contents(), t, field, name, "fp64_contents");
    case ir::DType::kI64: return store_contents<int64_t>(c.int64_contents(), t, field, name, "int64_contents");
    case ir::DType::kI32: return store_contents<int32_t>(c.int_contents(), t, field, name, "int_contents");
    case ir::DType::kI16: return store_contents<int16_t>(c.int_contents(), t, field, name, "int_contents");
    case ir::DType::kI8: return store_contents<int8_t>(c.int_contents(), t, field, name, "int_contents");
    case ir::DType::kU64: return store_contents<uint64_t>(c.uint64_contents(), t, field, name, "uint64_contents");
    case ir::DType::kU32: return store_contents<uint32_t>(c.uint_contents(), t, field, name, "uint_contents");
    case ir::DType::kU16: return store_contents<uint16_t>(c.uint_contents(), t, field, name, "uint_contents");
    case ir::DType::kU8: return store_contents<uint8_t>(c.uint_contents(), t, field, name, "uint_contents");
    case ir::DType::kBool: return store_contents<uint8_t>(c.bool_contents(), t, field, name, "bool_contents");
    case ir::DType::kF16:
    case ir::DType::kBF16:
      return ApiError::bad_field(field + ".contents", "input '" + name + "': " + kserve_datatype(t.dtype()) +
                                                          " values travel in raw_input_contents");
  }
  return ApiError::bad_field(field + ".contents", "input '" + name + "' has no contents");
}

}  // namespace

ApiResult<InferRequest> infer_request_from_grpc(const inference::ModelInferRequest& r, const ModelConfig& config) {
  InferRequest req;
  req.id = r.id();
  if (r.inputs_size() == 0) return ApiError::bad_field("inputs", "'inputs' must hold at least one tensor");
  const bool raw = r.raw_input_contents_size() > 0;
  if (raw && r.raw_input_contents_size() != r.inputs_size()) {
    return ApiError::bad_field("raw_input_contents", "raw_input_contents has " + std::to_string(r.raw_input_contents_size()) +
                                                         " entries for " + std::to_string(r.inputs_size()) + " inputs");
  }
  for (int i = 0; i < r.inputs_size(); ++i) {
    const auto& in = r.inputs(i);
    const std::string field = "inputs[" + std::to_string(i) + "]";
    std::vector<int64_t> shape(in.shape().begin(), in.shape().end());
    auto checked = infer_check_input(config, field, in.name(), in.datatype(), shape, req.inputs);
    if (auto* e = std::get_if<ApiError>(&checked)) return *e;
    ir::Tensor t(std::get<const ConfigTensor*>(checked)->dtype, shape);
    if (raw) {
      if (in.has_contents()) {
        return ApiError::bad_field(field + ".contents", "input '" + in.name() + "' has contents and raw_input_contents; send one");
      }
      const std::string& bytes = r.raw_input_contents(i);
      if (bytes.size() != t.byte_size()) {
        return ApiError::bad_field("raw_input_contents", "input '" + in.name() + "' is " + std::to_string(t.byte_size()) +
                                                             " bytes; raw_input_contents[" + std::to_string(i) + "] has " +
                                                             std::to_string(bytes.size()));
      }
      if (!bytes.empty()) std::memcpy(t.mutable_bytes(), bytes.data(), bytes.size());
    } else if (auto e = read_contents(in.contents(), t, field, in.name())) {
      return *e;
    }
    req.inputs.emplace(in.name(), std::move(t));
  }
  auto batch = infer_check_complete(config, req.inputs);
  if (auto* e = std::get_if<ApiError>(&batch)) return *e;
  req.batch = std::get<int64_t>(batch);
  for (int i = 0; i < r.outputs_size(); ++i) {
    if (auto e = infer_check_output(config, "outputs[" + std::to_string(i) + "]", r.outputs(i).name(), req.outputs)) return *e;
    req.outputs.push_back({r.outputs(i).name(), true});
  }
  if (req.outputs.empty()) {
    for (const ConfigTensor& t : config.outputs) req.outputs.push_back({t.name, true});
  }
  return req;
}

void infer_response_to_grpc(const InferRequest& request, const TensorList& outputs, const TensorModel& model,
                            inference::ModelInferResponse& response) {
  response.set_model_name(model.name);
  response.set_model_version(model.version);
  response.set_id(request.id);
  for (const InferOutputChoice& choice : request.outputs) {
    for (const auto& [name, t] : outputs) {
      if (name != choice.name) continue;
      auto* o = response.add_outputs();
      o->set_name(name);
      o->set_datatype(kserve_datatype(t.dtype()));
      for (int64_t d : t.shape()) o->add_shape(d);
      response.add_raw_output_contents(reinterpret_cast<const char*>(t.bytes()), t.byte_size());
    }
  }
}

void model_metadata_to_grpc(const TensorModel& m, inference::ModelMetadataResponse& r) {
  r.set_name(m.name);
  r.add_versions(m.version);
  r.set_platform(m.config.platform.empty() ? m.config.backend : m.config.platform);
  auto fill = [&](const std::vector<ConfigTensor>& list, auto add) {
    for (const ConfigTensor& t : list) {
      auto* meta = add();
      meta->set_name(t.name);
      meta->set_datatype(kserve_datatype(t.dtype));
      if (m.config.max_batch_size > 0) meta->add_shape(-1);
      for (int64_t d : t.dims) meta->add_shape(d);
    }
  };
  fill(m.config.inputs, [&] { return r.add_inputs(); });
  fill(m.config.outputs, [&] { return r.add_outputs(); });
}

void model_config_to_grpc(const ModelConfig& c, kiln::repository::ModelConfig& p) {
  p.set_name(c.name);
  p.set_platform(c.platform);
  p.set_backend(c.backend);
  p.set_max_batch_size(static_cast<int32_t>(c.max_batch_size));
  auto type_of = [](ir::DType d) {
    kiln::repository::DataType t = kiln::repository::TYPE_INVALID;
    kiln::repository::DataType_Parse(config_type(d), &t);
    return t;
  };
  for (const ConfigTensor& t : c.inputs) {
    auto* in = p.add_input();
    in->set_name(t.name);
    in->set_data_type(type_of(t.dtype));
    for (int64_t d : t.dims) in->add_dims(d);
  }
  for (const ConfigTensor& t : c.outputs) {
    auto* out = p.add_output();
    out->set_name(t.name);
    out->set_data_type(type_of(t.dtype));
    for (int64_t d : t.dims) out->add_dims(d);
  }
  auto* group = p.add_instance_group();
  group->set_name(c.name + "_0");
  group->set_kind(kiln::repository::ModelInstanceGroup::KIND_CPU);
  group->set_count(static_cast<int32_t>(c.instance_count));
  if (c.version) {
    p.mutable_version_policy()->mutable_specific()->add_versions(*c.version);
  } else {
    p.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (c.dynamic_batching) {
    auto* db = p.mutable_dynamic_batching();
    for (int64_t b : c.preferred_batch_sizes) db->add_preferred_batch_size(static_cast<int32_t>(b));
    db->set_max_queue_delay_microseconds(c.max_queue_delay_us);
  }
  if (!c.model_filename.empty()) p.set_default_model_filename(c.model_filename);
  (*p.mutable_parameters())["dtype"].set_string_value(c.dtype);
}

}  // namespace kiln::server
