#include "server/repository/model_config.h"

#include <algorithm>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "server/repository/kserve_datatype.h"
#include "server/repository/model_config.pb.h"

namespace kiln::server {
namespace {

namespace pb = kiln::repository;

// Collects the parser's first error and every warning (unknown fields), with 1-based positions.
class ConfigErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (error.empty()) error = "config.pbtxt:" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    warnings.push_back("config.pbtxt:" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message +
                       " (kiln does not use it; ignored)");
  }
  std::string error;
  std::vector<std::string> warnings;
};

Status field_error(const std::string& field, const std::string& problem) {
  return invalid_argument("config.pbtxt: " + field + ": " + problem);
}

template <typename Tensor>
Expected<ConfigTensor> config_tensor(const Tensor& t, const std::string& field) {
  ConfigTensor out;
  if (t.name().empty()) return field_error(field + ".name", "is required");
  out.name = t.name();
  const std::string type = pb::DataType_Name(t.data_type());
  if (t.data_type() == pb::TYPE_INVALID) return field_error(field + ".data_type", "is required (e.g. TYPE_FP32)");
  auto dtype = dtype_from_config_type(type);
  if (!dtype) return field_error(field + ".data_type", type + " tensors are not supported");
  out.dtype = *dtype;
  if (t.dims_size() == 0) return field_error(field + ".dims", "is required ([ ] for a scalar is written dims: [ 1 ] in Triton)");
  for (int i = 0; i < t.dims_size(); ++i) {
    if (t.dims(i) < -1 || t.dims(i) == 0) {
      return field_error(field + ".dims[" + std::to_string(i) + "]", std::to_string(t.dims(i)) + " is not a size (-1: any)");
    }
    out.dims.push_back(t.dims(i));
  }
  if (t.has_reshape()) return field_error(field + ".reshape", "is not supported by kiln");
  return out;
}

}  // namespace

Expected<ModelConfig> model_config_parse(std::string_view text, const std::string& dir_name) {
  pb::ModelConfig proto;
  ConfigErrors errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(true);
  if (!parser.ParseFromString(std::string(text), &proto)) {
    return invalid_argument(errors.error.empty() ? "config.pbtxt cannot be parsed" : errors.error);
  }
  ModelConfig c;
  c.warnings = std::move(errors.warnings);
  c.name = proto.name().empty() ? dir_name : proto.name();
  if (c.name != dir_name) {
    return field_error("name", "'" + proto.name() + "' differs from the model directory '" + dir_name + "'");
  }
  c.platform = proto.platform();
  c.backend = proto.backend();
  if (!c.platform.empty() && c.platform != "onnxruntime_onnx" && c.platform != "kiln") {
    return field_error("platform", "'" + c.platform + "' is not served by kiln (onnxruntime_onnx or kiln)");
  }
  if (!c.backend.empty() && c.backend != "onnxruntime" && c.backend != "kiln") {
    return field_error("backend", "'" + c.backend + "' is not served by kiln (onnxruntime or kiln)");
  }
  if (proto.max_batch_size() < 0) return field_error("max_batch_size", "must be >= 0");
  c.max_batch_size = proto.max_batch_size();
  for (int i = 0; i < proto.input_size(); ++i) {
    const std::string field = "input[" + std::to_string(i) + "]";
    KILN_ASSIGN_OR_RETURN(ConfigTensor t, config_tensor(proto.input(i), field));
    if (proto.input(i).optional()) return field_error(field + ".optional", "optional inputs are not supported by kiln");
    c.inputs.push_back(std::move(t));
  }
  for (int i = 0; i < proto.output_size(); ++i) {
    const std::string field = "output[" + std::to_string(i) + "]";
    KILN_ASSIGN_OR_RETURN(ConfigTensor t, config_tensor(proto.output(i), field));
    if (!proto.output(i).label_filename().empty()) {
      return field_error(field + ".label_filename", "classification labels are not supported by kiln");
    }
    c.outputs.push_back(std::move(t));
  }
  if (proto.has_dynamic_batching()) {
    if (c.max_batch_size == 0) {
      return field_error("dynamic_batching", "needs max_batch_size > 0 (the model takes a batch dimension)");
    }
    c.dynamic_batching = true;
    c.max_queue_delay_us = proto.dynamic_batching().max_queue_delay_microseconds();
    if (c.max_queue_delay_us > 10'000'000) {
      return field_error("dynamic_batching.max_queue_delay_microseconds", "must be at most 10000000 (10 s)");
    }
    for (int i = 0; i < proto.dynamic_batching().preferred_batch_size_size(); ++i) {
      const int64_t b = proto.dynamic_batching().preferred_batch_size(i);
      if (b < 1 || b > c.max_batch_size) {
        return field_error("dynamic_batching.preferred_batch_size[" + std::to_string(i) + "]",
                           std::to_string(b) + " is not in [1, max_batch_size = " + std::to_string(c.max_batch_size) + "]");
      }
      c.preferred_batch_sizes.push_back(b);
    }
    std::sort(c.preferred_batch_sizes.begin(), c.preferred_batch_sizes.end());
  }
  if (proto.instance_group_size() > 0) {
    c.instance_count = 0;
    for (int i = 0; i < proto.instance_group_size(); ++i) {
      const auto& g = proto.instance_group(i);
      const std::string field = "instance_group[" + std::to_string(i) + "]";
      if (g.kind() == pb::ModelInstanceGroup::KIND_GPU || g.gpus_size() > 0) {
        return field_error(field + ".kind", "general (ONNX) models run on the CPU; use KIND_CPU");
      }
      if (g.count() < 0 || g.count() > 64) return field_error(field + ".count", "must be in [1, 64]");
      c.instance_count += g.count() == 0 ? 1 : g.count();
    }
    if (c.instance_count > 64) return field_error("instance_group", "more than 64 instances in all");
  }
  if (proto.has_version_policy()) {
    const auto& p = proto.version_policy();
    if (p.has_all()) return field_error("version_policy.all", "kiln serves one version of a model");
    if (p.has_latest() && p.latest().num_versions() > 1) {
      return field_error("version_policy.latest.num_versions", "kiln serves one version of a model");
    }
    if (p.has_specific()) {
      if (p.specific().versions_size() != 1) {
        return field_error("version_policy.specific.versions", "name exactly one version (kiln serves one)");
      }
      if (p.specific().versions(0) < 0) return field_error("version_policy.specific.versions[0]", "must be >= 0");
      c.version = p.specific().versions(0);
    }
  }
  c.model_filename = proto.default_model_filename();
  if (c.model_filename.find('/') != std::string::npos || c.model_filename == "..") {
    return field_error("default_model_filename", "must be a file name in the version directory");
  }
  for (const auto& [key, value] : proto.parameters()) {
    if (key == "dtype") {
      c.dtype = value.string_value();
      if (c.dtype != "fp32" && c.dtype != "fp16" && c.dtype != "bf16") {
        return field_error("parameters[dtype]", "'" + c.dtype + "' is not fp32, fp16 or bf16");
      }
    } else {
      c.warnings.push_back("config.pbtxt: parameters[" + key + "]: kiln does not use it; ignored");
    }
  }
  return c;
}

ModelConfig model_config_default(const std::string& dir_name) {
  ModelConfig c;
  c.name = dir_name;
  c.platform = "onnxruntime_onnx";
  return c;
}

nlohmann::json model_config_json(const ModelConfig& c) {
  auto tensors = [](const std::vector<ConfigTensor>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const ConfigTensor& t : list) out.push_back({{"name", t.name}, {"data_type", config_type(t.dtype)}, {"dims", t.dims}});
    return out;
  };
  nlohmann::json j = {
      {"name", c.name},
      {"platform", c.platform},
      {"backend", c.backend},
      {"max_batch_size", c.max_batch_size},
      {"input", tensors(c.inputs)},
      {"output", tensors(c.outputs)},
      {"instance_group", nlohmann::json::array({{{"name", c.name + "_0"}, {"kind", "KIND_CPU"}, {"count", c.instance_count}}})},
      {"parameters", {{"dtype", {{"string_value", c.dtype}}}}},
  };
  if (c.version) {
    j["version_policy"] = {{"specific", {{"versions", {*c.version}}}}};
  } else {
    j["version_policy"] = {{"latest", {{"num_versions", 1}}}};
  }
  if (c.dynamic_batching) {
    j["dynamic_batching"] = {{"preferred_batch_size", c.preferred_batch_sizes},
                             {"max_queue_delay_microseconds", c.max_queue_delay_us}};
  }
  if (!c.model_filename.empty()) j["default_model_filename"] = c.model_filename;
  return j;
}

}  // namespace kiln::server
