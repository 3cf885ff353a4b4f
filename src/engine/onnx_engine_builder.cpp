#include <cstring>

#include "engine/engine_builder.h"
#include "engine/engine_writer.h"
#include "formats/onnx/onnx_model.h"
#include "passes/pipeline.h"

namespace kiln::engine {
namespace {

nlohmann::json value_json(const ir::Graph& graph, ir::ValueId id) {
  const ir::Value& v = graph.value(id);
  nlohmann::json dims = nlohmann::json::array();
  for (int64_t d : v.shape) {
    if (d >= 0) dims.push_back(d);
    else dims.push_back(graph.dim_str(d));
  }
  nlohmann::json out = {{"name", v.name}, {"dtype", ir::dtype_name(v.dtype)}};
  if (v.shape_known) out["dims"] = dims;
  return out;
}

}  // namespace

Status build_onnx_engine(const EngineBuildRequest& request, const EngineBuildHooks& hooks) {
  const ir::WeightFormat format = request.options.matmul_format;
  if (format != ir::WeightFormat::kF32 && format != ir::WeightFormat::kF16 && format != ir::WeightFormat::kBF16) {
    return invalid_argument("ONNX models build with --dtype fp32, fp16 or bf16 (for int8: --int8 --calib DIR)");
  }
  KILN_ASSIGN_OR_RETURN(formats::OnnxImport import, formats::onnx_import_file(request.model_dir));
  const int64_t ir_version = import.ir_version;
  const std::string producer = import.producer;
  const nlohmann::json opsets = import.opsets;
  KILN_ASSIGN_OR_RETURN(ir::Graph graph, formats::onnx_import_require_supported(std::move(import)));
  const size_t imported_nodes = graph.nodes().size();
  KILN_RETURN_IF_ERROR(ir::input_profiles_validate(graph, request.profiles));

  passes::PassContext ctx;
  ctx.options = request.options;
  ctx.int8 = request.int8 ? &*request.int8 : nullptr;
  ctx.tuner = hooks.tuner;
  ctx.evaluator = hooks.evaluator;
  ctx.log = hooks.note;
  auto on_pass = [&](size_t i, size_t n, const std::string& name) {
    if (hooks.progress) hooks.progress("pass " + name, i, n);
  };
  std::vector<passes::PassRecord> records;
  KILN_RETURN_IF_ERROR(passes::run_pipeline(graph, ctx, request.dump_after, hooks.dump, on_pass, &records));

  EngineWriter writer;
  writer.set_header(hooks.tuner->target(), "format=" + std::string(ir::weight_format_name(format)) + " source=onnx");
  for (auto& [name, w] : graph.weights()) {
    const ir::WeightEntry entry = w;
    writer.add_blob("weight/" + name, entry.stored_bytes(), [entry, name = name](std::span<std::byte> out) -> Status {
      if (entry.dtype != ir::DType::kF32) {
        KILN_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, entry.load_bytes());
        if (bytes.size() != out.size()) return internal_error("weight '" + name + "' loaded with the wrong size");
        if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
        return Status::ok();
      }
      KILN_ASSIGN_OR_RETURN(std::vector<float> values, entry.load());
      if (static_cast<int64_t>(values.size()) != entry.numel()) {
        return internal_error("weight '" + name + "' loaded with the wrong size");
      }
      if (!values.empty()) ir::weight_quantize(entry.format, values.data(), entry.rows(), entry.cols(), out.data());
      return Status::ok();
    });
  }
  nlohmann::json inputs = nlohmann::json::array(), outputs = nlohmann::json::array();
  for (ir::ValueId id : graph.inputs()) inputs.push_back(value_json(graph, id));
  for (ir::ValueId id : graph.outputs()) outputs.push_back(value_json(graph, id));
  nlohmann::json build = {{"format", ir::weight_format_name(format)}, {"passes", pass_records_json(records)}};
  if (request.int8) {
    int64_t quantized = 0;
    for (const ir::Node& n : graph.nodes()) quantized += n.op == "kiln.QConv" || n.op == "kiln.QMatMul";
    build["int8"] = {{"calibrator", passes::calibrator_name(request.int8->calibrator)},
                     {"samples", request.int8->samples.size()},
                     {"quantized_nodes", quantized}};
    if (request.int8->calibrator == passes::Calibrator::kPercentile) build["int8"]["percentile"] = request.int8->percentile;
  }
  nlohmann::json metadata = {
      {"model",
       {{"architecture", "onnx"}, {"family", "onnx"}, {"vocab_size", 0}, {"max_seq_len", 0}, {"max_batch_tokens", 0}}},
      {"onnx",
       {{"ir_version", ir_version},
        {"opsets", opsets},
        {"producer", producer},
        {"inputs", inputs},
        {"outputs", outputs},
        {"profiles", ir::input_profiles_to_json(request.profiles)},
        {"imported_nodes", imported_nodes},
        {"nodes", graph.nodes().size()}}},
      {"build", build},
      {"files", nlohmann::json::array()},
      {"graph", ir::graph_to_json(graph)},
  };
  auto progress = [&](uint64_t done, uint64_t total) {
    if (hooks.progress) hooks.progress("writing weights", done, total);
  };
  return writer.write(request.output_path, std::move(metadata), progress);
}

}  // namespace kiln::engine
