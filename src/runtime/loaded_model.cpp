#include "runtime/loaded_model.h"

namespace kiln::runtime {

std::string weight_blob_name(const std::string& weight) { return "weight/" + weight; }
std::string file_blob_name(const std::string& file) { return "file/" + file; }

std::map<std::string, std::string> LoadedModel::files() const {
  std::map<std::string, std::string> out;
  const auto listed = file_.metadata().find("files");
  if (listed == file_.metadata().end() || !listed->is_array()) return out;
  for (const auto& entry : *listed) {
    if (!entry.is_string()) continue;
    const std::string name = entry.get<std::string>();
    const auto bytes = file_.blob(file_blob_name(name));
    out.emplace(name, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }
  return out;
}

KvCacheDtype LoadedModel::native_kv_cache_dtype() const {
  bool any = false;
  for (const ir::Node& node : graph_.nodes()) {
    if (node.op != "matmul") continue;
    const ir::WeightFormat base = ir::weight_format_base(graph_.weight(node.inputs[1]).format);
    if (base != ir::WeightFormat::kBF16 && base != ir::WeightFormat::kF8E4M3) return KvCacheDtype::kF32;
    any = true;
  }
  return any ? KvCacheDtype::kBF16 : KvCacheDtype::kF32;
}

Expected<std::vector<ir::InputProfile>> LoadedModel::input_profiles() const {
  return ir::input_profiles_from_json(metadata().value("onnx", nlohmann::json::object()).value("profiles", nlohmann::json()));
}

Expected<std::unique_ptr<LoadedModel>> LoadedModel::load(const std::string& path, bool verify_checksum) {
  KILN_ASSIGN_OR_RETURN(engine::EngineFile file, engine::EngineFile::open(path, {.verify_checksum = verify_checksum}));
  std::unique_ptr<LoadedModel> model(new LoadedModel(std::move(file)));
  const nlohmann::json& meta = model->file_.metadata();
  if (!meta.contains("graph") || !meta.contains("model")) {
    return invalid_argument(path + " has no graph or model section; rebuild it with `kiln build`");
  }
  KILN_ASSIGN_OR_RETURN(model->graph_, ir::graph_from_json(meta.at("graph")));
  // General (ONNX) graphs have weights of any rank and dtype; LLM weights are 1-D or 2-D.
  const bool general = model->graph_.has_tensor_ops();
  for (auto& [name, w] : model->graph_.weights()) {
    auto bytes = model->file_.blob(weight_blob_name(name));
    if ((!general && (w.shape.empty() || w.shape.size() > 2)) ||
        (w.dtype == ir::DType::kF32 && w.numel() > 0 && !ir::weight_format_fits(w.format, w.rows(), w.cols()))) {
      return invalid_argument(path + ": weight '" + name + "' cannot be stored as " +
                              std::string(ir::weight_format_name(w.format)) + " with its shape; the file is damaged "
                              "— rebuild it with `kiln build`");
    }
    const size_t want = w.stored_bytes();
    if (bytes.size() != want) {
      return invalid_argument(path + ": weight '" + name + "' holds " + std::to_string(bytes.size()) +
                              " bytes, its shape and format need " + std::to_string(want) +
                              "; the file is damaged — rebuild it with `kiln build`");
    }
    w.stored = bytes;
    model->weight_bytes_ += bytes.size();
  }
  if (const auto listed = meta.find("files"); listed != meta.end() && listed->is_array()) {
    for (const auto& name : *listed) {
      if (!name.is_string() || !model->file_.has_blob(file_blob_name(name.get<std::string>()))) {
        return invalid_argument(path + " lists file " + name.dump() + " but has no blob for it; rebuild it with kiln build");
      }
    }
  }
  try {
    const auto& m = meta.at("model");
    ModelFacts& f = model->facts_;
    f.architecture = m.at("architecture").get<std::string>();
    f.vocab_size = m.at("vocab_size").get<int64_t>();
    f.max_seq_len = m.at("max_seq_len").get<int64_t>();
    f.max_batch_tokens = m.at("max_batch_tokens").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(path + ": malformed model section (" + e.what() + "); rebuild it with `kiln build`");
  }
  for (const auto& node : model->graph_.nodes()) {
    if (node.op != "attention") continue;
    ModelFacts& f = model->facts_;
    f.num_layers = std::max(f.num_layers, node.attr_int("layer") + 1);
    f.num_kv_heads = node.attr_int("num_kv_heads");
    f.head_dim = node.attr_int("head_dim");
  }
  return model;
}

}  // namespace kiln::runtime
