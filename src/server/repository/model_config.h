// ModelConfig: one model's configuration in a model repository, read from Triton's config.pbtxt
// (the text form of its ModelConfig message; model_config.proto holds the fields kiln reads) and
// validated once, at load: a value kiln cannot honour is an error naming the field
// ("config.pbtxt: input[1].data_type: ..."), and a field kiln reads past is a warning.
// Plain data; the repository owns one per loaded model and completes it from the engine when
// config.pbtxt leaves inputs or outputs out (model_repository.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::server {

struct ConfigTensor {
  std::string name;
  ir::DType dtype = ir::DType::kF32;
  // Without the batch dimension when max_batch_size > 0 (requests then send [batch, dims...]);
  // -1: any size.
  std::vector<int64_t> dims;
};

struct ModelConfig {
  std::string name;
  std::string platform;  // "onnxruntime_onnx", "kiln" or empty
  std::string backend;   // "onnxruntime", "kiln" or empty
  int64_t max_batch_size = 0;  // 0: no batch dimension, no batching
  std::vector<ConfigTensor> inputs, outputs;
  bool dynamic_batching = false;
  std::vector<int64_t> preferred_batch_sizes;  // ascending
  uint64_t max_queue_delay_us = 0;
  int64_t instance_count = 1;  // model instances, each running one batch at a time
  std::optional<int64_t> version;  // version_policy: specific; else the newest version directory
  std::string model_filename;      // default_model_filename; else model.kiln, then model.onnx
  std::string dtype = "fp32";      // parameters { key: "dtype" }: precision of a compiled ONNX model
  std::vector<std::string> warnings;  // fields kiln reads past, one line each
};

// `text` is config.pbtxt of the model directory `dir_name`.
Expected<ModelConfig> model_config_parse(std::string_view text, const std::string& dir_name);

// The configuration of a model directory without config.pbtxt: no batching, one instance, the
// inputs and outputs the engine declares (filled in at load).
ModelConfig model_config_default(const std::string& dir_name);

// GET /v2/models/{m}/config: the configuration in the JSON form of Triton's ModelConfig.
nlohmann::json model_config_json(const ModelConfig& config);

}  // namespace kiln::server
