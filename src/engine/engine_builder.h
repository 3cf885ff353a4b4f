// `kiln build` as a library call: checkpoint -> graph (formats/) -> pass pipeline (passes/) ->
// one engine file (engine_writer). Weights stream through one at a time, so peak memory is about
// the largest single weight in float, whatever the model's size.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "formats/hf/hf_checkpoint.h"
#include "ir/input_profile.h"
#include "passes/pass.h"
#include "passes/pipeline.h"

namespace kiln::engine {

struct EngineBuildRequest {
  std::string model_dir;
  std::string output_path;
  passes::BuildOptions options;
  int64_t max_seq_len = 0;  // 0: the model's own limit (max_position_embeddings)
  std::string dump_after;   // pass name, "input" or "all"
  std::vector<ir::InputProfile> profiles;  // ONNX only: recorded in the engine, see ir/input_profile.h
  std::optional<passes::Int8Calibration> int8;  // ONNX only: calibrated int8 (passes/quantize_int8.cpp)
};

struct EngineBuildHooks {
  passes::KernelTuner* tuner = nullptr;
  passes::NodeEvaluator* evaluator = nullptr;  // constant folding of general graphs (optional)
  std::function<void(const std::string&)> note;                 // user-facing notes
  std::function<void(const std::string&)> dump;                 // graph dumps (--dump-after)
  std::function<void(const std::string& stage, uint64_t done, uint64_t total)> progress;
};

// The short "dtype=... max_seq_len=..." string stored in the engine header.
std::string build_options_string(const passes::BuildOptions& options);

// model_dir is a Hugging Face directory, or an ONNX file (*.onnx: build_onnx_engine()).
Status build_engine(const EngineBuildRequest& request, const EngineBuildHooks& hooks);

// `kiln build model.onnx`: ONNX import (formats/onnx/onnx_model.h) -> the same pass pipeline -> an
// engine whose metadata "model" section has family "onnx" and an "onnx" section listing the
// graph's inputs and outputs (names, dtypes, dims with symbolic names) and the request's input
// profiles (checked against the inputs first). Refuses a model with any node Kiln cannot run,
// naming the first (kiln check lists them all).
Status build_onnx_engine(const EngineBuildRequest& request, const EngineBuildHooks& hooks);

// The engine metadata's record of the passes: [{"name", "nodes_before", "nodes_after"}, ...].
nlohmann::json pass_records_json(const std::vector<passes::PassRecord>& records);

}  // namespace kiln::engine
