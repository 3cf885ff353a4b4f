#include "formats/hf/hf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace kiln::formats {
namespace {

namespace fs = std::filesystem;

constexpr const char* kAuxiliaryFiles[] = {
    "tokenizer.json",        "tokenizer.model",          "tokenizer_config.json", "generation_config.json",
    "special_tokens_map.json", "vocab.json",             "merges.txt",
};

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Files in `dir` whose names end with one of `suffixes`, sorted.
std::vector<std::string> files_with_suffix(const fs::path& dir, std::initializer_list<std::string_view> suffixes) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    for (std::string_view s : suffixes) {
      if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        out.push_back(name);
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status no_weights_error(const fs::path& dir) {
  const std::vector<std::string> pickles = files_with_suffix(dir, {".bin", ".pt", ".pth"});
  if (!pickles.empty()) {
    // Name the weights file rather than, say, training_args.bin.
    auto named = std::find_if(pickles.begin(), pickles.end(),
                              [](const std::string& n) { return n.rfind("pytorch_model", 0) == 0; });
    return unimplemented(
        dir.string() + " holds a PyTorch checkpoint (" + (named != pickles.end() ? *named : pickles.front()) +
        ") but no safetensors files; Kiln reads only safetensors. Convert it with: python -c "
        "\"from transformers import AutoModelForCausalLM as M; "
        "M.from_pretrained('" + dir.string() + "').save_pretrained('OUT_DIR', safe_serialization=True)\" "
        "and copy the tokenizer files to OUT_DIR");
  }
  return not_found(dir.string() + " has no model.safetensors, model.safetensors.index.json or "
                   "other *.safetensors file");
}

// A shard name from the index must be a plain file name inside the directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

}  // namespace

Expected<HfCheckpoint> HfCheckpoint::open(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return not_found(dir + " is not a directory");

  HfCheckpoint ckpt;
  ckpt.dir_ = dir;
  const fs::path config_path = root / "config.json";
  if (!is_file(config_path)) {
    return not_found(dir + " has no config.json; expected a Hugging Face model directory "
                     "(config.json plus *.safetensors)");
  }
  KILN_ASSIGN_OR_RETURN(ckpt.config_, load_model_config(config_path.string()));

  auto open_shard = [&](const std::string& name) -> Expected<size_t> {
    KILN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open((root / name).string()));
    ckpt.shards_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
    return ckpt.shards_.size() - 1;
  };

  const fs::path index_path = root / "model.safetensors.index.json";
  if (is_file(index_path)) {
    KILN_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path.string()));
    const nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object()) {
      return invalid_argument(index_path.string() + ": not a valid JSON object");
    }
    auto map_it = index.find("weight_map");
    if (map_it == index.end() || !map_it->is_object() || map_it->empty()) {
      return invalid_argument(index_path.string() + ": missing or empty \"weight_map\" object");
    }
    std::map<std::string, size_t> shard_ids;  // file name -> index into shards_, opened in name order
    for (const auto& [tensor, shard] : map_it->items()) {
      if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>())) {
        return invalid_argument(index_path.string() + ": weight_map entry for '" + tensor +
                                "' is " + shard.dump() + ", not a file name in the directory");
      }
      const std::string name = shard.get<std::string>();
      if (shard_ids.count(name) == 0 && !is_file(root / name)) {
        return not_found(index_path.string() + " names shard " + name + " (for tensor '" + tensor +
                         "'), which is missing from " + dir + "; the download is incomplete");
      }
      shard_ids.emplace(name, 0);
    }
    for (auto& [name, id] : shard_ids) {
      KILN_ASSIGN_OR_RETURN(id, open_shard(name));
    }
    for (const auto& [tensor, shard] : map_it->items()) {
      const std::string& name = shard.get_ref<const std::string&>();
      const TensorView* view = ckpt.shards_[shard_ids.at(name)]->find(tensor);
      if (view == nullptr) {
        return not_found(index_path.string() + " places tensor '" + tensor + "' in " + name +
                         ", which does not contain it");
      }
      ckpt.tensors_.emplace(tensor, view);
    }
    return ckpt;
  }

  std::vector<std::string> files;
  if (is_file(root / "model.safetensors")) {
    files.push_back("model.safetensors");
  } else {
    files = files_with_suffix(root, {".safetensors"});
  }
  if (files.empty()) return no_weights_error(root);
  for (const std::string& name : files) {
    KILN_ASSIGN_OR_RETURN(size_t id, open_shard(name));
    for (const TensorView& t : ckpt.shards_[id]->tensors()) {
      auto [it, inserted] = ckpt.tensors_.emplace(t.name, &t);
      if (!inserted) {
        return invalid_argument(dir + ": tensor '" + t.name + "' appears in two files (" +
                                name + " and another *.safetensors); add a "
                                "model.safetensors.index.json that says which to use");
      }
    }
  }
  return ckpt;
}

const TensorView* HfCheckpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> HfCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& entry : tensors_) names.push_back(entry.first);
  return names;
}

std::vector<std::string> HfCheckpoint::shard_paths() const {
  std::vector<std::string> paths;
  for (const auto& shard : shards_) paths.push_back(shard->path());
  return paths;
}

Expected<std::vector<float>> HfCheckpoint::load(std::string_view name,
                                                const std::vector<int64_t>& expected_shape) const {
  const TensorView* t = find(name);
  if (t == nullptr) {
    return not_found("tensor '" + std::string(name) + "' is not in the checkpoint " + dir_ +
                     " (architecture " + config_.architecture_name + ")");
  }
  if (t->shape != expected_shape) {
    return invalid_argument("tensor '" + t->name + "' has shape " + shape_to_string(t->shape) +
                            " but config.json implies " + shape_to_string(expected_shape));
  }
  std::vector<float> out(static_cast<size_t>(tensor_numel(*t)));
  KILN_RETURN_IF_ERROR(tensor_to_float(*t, out));
  return out;
}

std::map<std::string, std::string> HfCheckpoint::auxiliary_files() const {
  std::map<std::string, std::string> out;
  for (const char* name : kAuxiliaryFiles) {
    const fs::path p = fs::path(dir_) / name;
    if (!is_file(p)) continue;
    Expected<std::string> text = read_text_file(p.string());
    if (text) out.emplace(name, std::move(text).value());
  }
  return out;
}

}  // namespace kiln::formats
