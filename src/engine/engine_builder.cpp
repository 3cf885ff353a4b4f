#include "engine/engine_builder.h"

#include <cstring>
#include <map>
#include <memory>

#include "engine/engine_writer.h"
#include "formats/hf/model_graph.h"
#include "formats/onnx/onnx_model.h"
#include "passes/pipeline.h"

namespace kiln::engine {
namespace {

const char* architecture_key(formats::Architecture a) {
  switch (a) {
    case formats::Architecture::kLlama: return "llama";
    case formats::Architecture::kMistral: return "mistral";
    case formats::Architecture::kQwen2: return "qwen2";
    case formats::Architecture::kGpt2: return "gpt2";
    case formats::Architecture::kBaichuan: return "baichuan";
  }
  return "unknown";
}

nlohmann::json model_section(const formats::ModelConfig& c, const passes::BuildOptions& o) {
  return {{"architecture", c.architecture_name},
          {"family", architecture_key(c.architecture)},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_layers", c.num_layers},
          {"num_heads", c.num_heads},
          {"num_kv_heads", c.num_kv_heads},
          {"head_dim", c.head_dim},
          {"max_position_embeddings", c.max_position_embeddings},
          {"max_seq_len", o.max_seq_len},
          {"max_batch_tokens", o.max_batch_tokens},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"sliding_window", c.sliding_window},
          {"alibi", c.alibi},
          {"normalized_lm_head", c.normalized_lm_head}};
}

nlohmann::json kernel_section(const ir::Graph& graph) {
  // Distinct (kernel, shape) choices, with their timings, in node order.
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, bool> seen;
  for (const auto& node : graph.nodes()) {
    if (node.op != "matmul") continue;
    const ir::WeightEntry& w = graph.weight(node.inputs[1]);
    const std::string key = std::string(ir::weight_format_name(w.format)) + ":" + std::to_string(w.rows()) + "x" +
                            std::to_string(w.cols());
    if (seen[key]) continue;
    seen[key] = true;
    out.push_back({{"format", ir::weight_format_name(w.format)},
                   {"n", w.rows()},
                   {"k", w.cols()},
                   {"decode", node.attr_str("kernel_decode")},
                   {"prefill", node.attr_str("kernel_prefill")},
                   {"decode_us", node.attr_float("kernel_decode_us")},
                   {"prefill_us", node.attr_float("kernel_prefill_us")}});
  }
  return out;
}

}  // namespace

std::string build_options_string(const passes::BuildOptions& options) {
  return "format=" + std::string(ir::weight_format_name(options.matmul_format)) +
         " max_seq_len=" + std::to_string(options.max_seq_len) +
         " max_batch_tokens=" + std::to_string(options.max_batch_tokens) +
         " autotune=" + (options.autotune ? "on" : "off");
}

Status build_engine(const EngineBuildRequest& request, const EngineBuildHooks& hooks) {
  if (hooks.tuner == nullptr) return internal_error("build_engine needs a kernel tuner");
  if (formats::is_onnx_path(request.model_dir)) return build_onnx_engine(request, hooks);
  if (request.int8) {
    return invalid_argument("--int8 --calib applies to ONNX models; a Hugging Face model takes --dtype int8 or int4");
  }
  if (!request.profiles.empty()) return invalid_argument("--profile applies to ONNX models only");
  KILN_ASSIGN_OR_RETURN(formats::HfCheckpoint ckpt, formats::HfCheckpoint::open(request.model_dir));
  const formats::ModelConfig& config = ckpt.config();

  passes::BuildOptions options = request.options;
  // Default: the model's own limit; dynamic NTK rope exists to stretch it by its factor.
  int64_t model_limit = config.max_position_embeddings;
  if (config.rope.type == formats::RopeType::kDynamic) {
    model_limit = static_cast<int64_t>(static_cast<double>(model_limit) * config.rope.factor);
  }
  options.max_seq_len = request.max_seq_len > 0 ? request.max_seq_len : model_limit;
  if (options.max_seq_len <= 0) {
    return invalid_argument("config.json gives no maximum sequence length; pass --max-seq-len");
  }
  if (config.architecture == formats::Architecture::kGpt2 && options.max_seq_len > config.max_position_embeddings) {
    return invalid_argument("--max-seq-len " + std::to_string(options.max_seq_len) + " exceeds GPT-2's " +
                            std::to_string(config.max_position_embeddings) + " learned positions (n_positions)");
  }
  if (options.max_batch_tokens <= 0) return invalid_argument("--max-batch-tokens must be positive");

  KILN_ASSIGN_OR_RETURN(ir::Graph graph, formats::build_model_graph(ckpt));
  passes::PassContext ctx;
  ctx.options = options;
  ctx.tuner = hooks.tuner;
  ctx.log = hooks.note;
  auto on_pass = [&](size_t i, size_t n, const std::string& name) {
    if (hooks.progress) hooks.progress("pass " + name, i, n);
  };
  std::vector<passes::PassRecord> records;
  KILN_RETURN_IF_ERROR(passes::run_pipeline(graph, ctx, request.dump_after, hooks.dump, on_pass, &records));

  EngineWriter writer;
  writer.set_header(hooks.tuner->target(), build_options_string(options));
  for (auto& [name, w] : graph.weights()) {
    const int64_t rows = w.rows(), cols = w.cols();
    const ir::WeightFormat format = w.format;
    const uint64_t size = static_cast<uint64_t>(rows) * ir::weight_format_row_bytes(format, cols);
    const ir::WeightLoader load = w.load;
    writer.add_blob("weight/" + name, size, [load, rows, cols, format, name = name](std::span<std::byte> out) -> Status {
      KILN_ASSIGN_OR_RETURN(std::vector<float> values, load());
      if (static_cast<int64_t>(values.size()) != rows * cols) {
        return internal_error("weight '" + name + "' loaded with the wrong size");
      }
      ir::weight_quantize(format, values.data(), rows, cols, out.data());
      return Status::ok();
    });
  }
  nlohmann::json files = nlohmann::json::array();
  auto aux = std::make_shared<std::map<std::string, std::string>>(ckpt.auxiliary_files());
  for (const auto& [name, contents] : *aux) {
    files.push_back(name);
    writer.add_blob("file/" + name, contents.size(), [aux, name = name](std::span<std::byte> out) -> Status {
      const std::string& c = aux->at(name);
      std::memcpy(out.data(), c.data(), c.size());
      return Status::ok();
    });
  }
  nlohmann::json metadata = {
      {"model", model_section(config, options)},
      {"config_json", config.raw},
      {"build",
       {{"format", ir::weight_format_name(options.matmul_format)},
        {"max_seq_len", options.max_seq_len},
        {"max_batch_tokens", options.max_batch_tokens},
        {"autotune", options.autotune},
        {"source_dtype", config.source_dtype},
        {"passes", pass_records_json(records)}}},
      {"kernels", kernel_section(graph)},
      {"files", files},
      {"graph", ir::graph_to_json(graph)},
  };
  if (const std::string device = hooks.tuner->device_name(); !device.empty()) metadata["build"]["device"] = device;
  auto progress = [&](uint64_t done, uint64_t total) {
    if (hooks.progress) hooks.progress("writing weights", done, total);
  };
  return writer.write(request.output_path, std::move(metadata), progress);
}

nlohmann::json pass_records_json(const std::vector<passes::PassRecord>& records) {
  nlohmann::json out = nlohmann::json::array();
  for (const passes::PassRecord& r : records) {
    out.push_back({{"name", r.name}, {"nodes_before", r.nodes_before}, {"nodes_after", r.nodes_after}});
  }
  return out;
}

}  // namespace kiln::engine
