#include "server/repository/model_repository.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tuner.h"
#include "backends/cpu/tensor/tensor_graph_runner.h"
#include "engine/engine_builder.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

Expected<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The version directory to serve: the named one, else the largest number.
Expected<std::string> version_dir(const fs::path& model_dir, const ModelConfig& config) {
  if (config.version) {
    const std::string v = std::to_string(*config.version);
    if (!fs::is_directory(model_dir / v)) {
      return not_found("version_policy names version " + v + ", but " + (model_dir / v).string() + " does not exist");
    }
    return v;
  }
  int64_t best = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || n.empty() || n.size() > 18 || !std::all_of(n.begin(), n.end(), ::isdigit)) continue;
    best = std::max<int64_t>(best, std::stoll(n));
  }
  if (best < 0) return not_found("no version directory in " + model_dir.string() + " (e.g. " + (model_dir / "1").string() + "/model.onnx)");
  return std::to_string(best);
}

ir::WeightFormat format_of(const std::string& dtype) {
  if (dtype == "fp16") return ir::WeightFormat::kF16;
  if (dtype == "bf16") return ir::WeightFormat::kBF16;
  return ir::WeightFormat::kF32;
}

// The engine's inputs or outputs as config tensors (the batch dimension left out when batching).
Expected<std::vector<ConfigTensor>> tensors_of(const ir::Graph& graph, const std::vector<ir::ValueId>& ids,
                                               int64_t max_batch_size, const char* side) {
  std::vector<ConfigTensor> out;
  for (ir::ValueId id : ids) {
    const ir::Value& v = graph.value(id);
    if (!v.shape_known) {
      return invalid_argument(std::string(side) + " '" + v.name + "' has no known rank; give its dims in config.pbtxt");
    }
    ConfigTensor t{v.name, v.dtype, {}};
    for (int64_t d : v.shape) t.dims.push_back(ir::dim_is_static(d) ? d : -1);
    if (max_batch_size > 0) {
      if (t.dims.empty() || t.dims[0] != -1) {
        return invalid_argument("config.pbtxt: max_batch_size: the model's " + std::string(side) + " '" + v.name + "' " +
                                (t.dims.empty() ? std::string("is a scalar")
                                                : "has a fixed first dimension of " + std::to_string(t.dims[0])) +
                                ", so it takes no batch dimension (set max_batch_size: 0)");
      }
      t.dims.erase(t.dims.begin());
    }
    if (t.dims.empty()) t.dims.push_back(1);
    out.push_back(std::move(t));
  }
  return out;
}

// Checks config.pbtxt's tensors against the engine's, naming the field at fault.
Status check_tensors(const std::vector<ConfigTensor>& config, const std::vector<ConfigTensor>& engine, const char* field,
                     bool all_needed) {
  for (size_t i = 0; i < config.size(); ++i) {
    const std::string where = "config.pbtxt: " + std::string(field) + "[" + std::to_string(i) + "]";
    const ConfigTensor* e = nullptr;
    for (const ConfigTensor& t : engine) {
      if (t.name == config[i].name) e = &t;
    }
    if (e == nullptr) {
      std::string names;
      for (const ConfigTensor& t : engine) names += (names.empty() ? "'" : ", '") + t.name + "'";
      return invalid_argument(where + ".name: the model has no " + field + " '" + config[i].name + "' (it has " + names + ")");
    }
    if (e->dtype != config[i].dtype) {
      return invalid_argument(where + ".data_type: the model's " + field + " '" + e->name + "' is " + std::string(ir::dtype_name(e->dtype)));
    }
    const bool scalar = e->dims == std::vector<int64_t>{1} && config[i].dims == std::vector<int64_t>{1};
    if (!scalar && e->dims.size() != config[i].dims.size()) {
      return invalid_argument(where + ".dims: the model's " + field + " '" + e->name + "' has " + std::to_string(e->dims.size()) +
                              " dimensions besides any batch dimension; dims gives " + std::to_string(config[i].dims.size()));
    }
    for (size_t d = 0; !scalar && d < e->dims.size(); ++d) {
      if (e->dims[d] != -1 && config[i].dims[d] != -1 && e->dims[d] != config[i].dims[d]) {
        return invalid_argument(where + ".dims[" + std::to_string(d) + "]: the model's " + field + " '" + e->name + "' has " +
                                std::to_string(e->dims[d]) + " there");
      }
    }
  }
  if (all_needed) {
    for (const ConfigTensor& t : engine) {
      if (std::none_of(config.begin(), config.end(), [&](const ConfigTensor& c) { return c.name == t.name; })) {
        return invalid_argument("config.pbtxt: " + std::string(field) + ": the model's " + field + " '" + t.name + "' is missing");
      }
    }
  }
  return Status::ok();
}

}  // namespace

bool model_name_is_valid(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name.size() <= 255;
}

TensorModel::~TensorModel() {
  if (batcher) batcher->stop();
}

ModelRepository::ModelRepository(Options options, RepositoryMetrics& metrics)
    : options_(std::move(options)), metrics_(metrics) {}

void ModelRepository::note(const std::string& line) const {
  if (options_.log) options_.log(line);
}

void ModelRepository::load_all() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.root, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && model_name_is_valid(n)) names.push_back(n);
  }
  if (ec) note("cannot list the model repository " + options_.root + ": " + ec.message());
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (Status s = load(n); !s) note("model '" + n + "' is UNAVAILABLE: " + s.message());
  }
}

Status ModelRepository::load(const std::string& name) {
  if (!model_name_is_valid(name)) return not_found("'" + name + "' is not a model name");
  if (!fs::is_directory(fs::path(options_.root) / name)) {
    return not_found("the model repository has no model '" + name + "' (no directory " +
                     (fs::path(options_.root) / name).string() + ")");
  }
  {
    std::lock_guard lock(mu_);
    Slot& slot = slots_[name];
    if (slot.busy) return invalid_argument("model '" + name + "' is being loaded or unloaded already");
    slot.busy = true;
    if (!slot.model) slot.state = "LOADING";
  }
  Expected<std::shared_ptr<TensorModel>> built = internal_error("not built");
  try {
    built = build(name);
  } catch (const std::exception& e) {
    built = internal_error(std::string("loading model '") + name + "': " + e.what());
  }
  std::shared_ptr<TensorModel> old;
  {
    std::lock_guard lock(mu_);
    Slot& slot = slots_[name];
    slot.busy = false;
    if (!built) {
      // A failed reload leaves the version in service as it was.
      if (!slot.model) {
        slot.state = "UNAVAILABLE";
        slot.reason = built.status().message();
      }
      return built.status();
    }
    old = std::move(slot.model);
    slot.model = *built;
    slot.state = "READY";
    slot.reason.clear();
    slot.version = (*built)->version;
  }
  metrics_.set_ready(name, true);
  note("model '" + name + "' version " + (*built)->version + " is READY (" + (*built)->engine_path + ")");
  return Status::ok();
}

Status ModelRepository::unload(const std::string& name) {
  std::shared_ptr<TensorModel> old;
  {
    std::lock_guard lock(mu_);
    auto it = slots_.find(name);
    if (it == slots_.end() || !it->second.model) {
      if (!model_name_is_valid(name) || !fs::is_directory(fs::path(options_.root) / name)) {
        return not_found("the model repository has no model '" + name + "'");
      }
      return Status::ok();  // not loaded: nothing to do
    }
    if (it->second.busy) return invalid_argument("model '" + name + "' is being loaded or unloaded already");
    old = std::move(it->second.model);
    it->second.state = "UNAVAILABLE";
    it->second.reason = "unloaded";
  }
  metrics_.set_ready(name, false);
  note("model '" + name + "' unloaded");
  return Status::ok();  // `old` goes when its last request does
}

Expected<std::shared_ptr<TensorModel>> ModelRepository::ready(const std::string& name, const std::string& version) const {
  std::lock_guard lock(mu_);
  auto it = slots_.find(name);
  if (it == slots_.end()) return not_found("the model '" + name + "' does not exist in the model repository");
  const Slot& slot = it->second;
  if (!slot.model) {
    return invalid_argument("the model '" + name + "' is not ready (" + slot.state +
                            (slot.reason.empty() ? "" : ": " + slot.reason) + ")");
  }
  if (!version.empty() && version != slot.model->version) {
    return invalid_argument("the model '" + name + "' serves version " + slot.model->version + ", not " + version);
  }
  return slot.model;
}

std::vector<ModelRepository::Entry> ModelRepository::index() const {
  std::map<std::string, Entry> entries;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.root, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && model_name_is_valid(n)) entries[n] = Entry{n, "", "UNAVAILABLE", "not loaded"};
  }
  std::lock_guard lock(mu_);
  for (const auto& [name, slot] : slots_) {
    Entry& entry = entries[name];
    entry.name = name;
    entry.version = slot.version;
    entry.state = slot.model ? "READY" : slot.state;
    entry.reason = slot.model ? "" : slot.reason;
    if (slot.busy) entry.state = slot.model ? "READY" : "LOADING";
  }
  std::vector<Entry> out;
  for (auto& [name, entry] : entries) out.push_back(std::move(entry));
  return out;
}

static Expected<std::string> model_file(const std::string& version_path, const ModelConfig& config) {
  const fs::path dir(version_path);
  if (!config.model_filename.empty()) {
    const fs::path file = dir / config.model_filename;
    if (!fs::exists(file)) return not_found("default_model_filename names " + file.string() + ", which does not exist");
    return file.string();
  }
  if (fs::exists(dir / "model.kiln")) return (dir / "model.kiln").string();
  if (fs::exists(dir / "model.onnx")) return (dir / "model.onnx").string();
  return not_found("no model.kiln or model.onnx in " + dir.string());
}

Expected<std::string> ModelRepository::engine_for(const std::string& name, const std::string& model_path,
                                                  const ModelConfig& config) {
  const fs::path file(model_path);
  if (file.extension() != ".onnx") return file.string();

  // An ONNX model: its engine from the cache, compiled there on first use.
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(file));
  const std::string key_text = std::string(KILN_VERSION) + "|" + config.dtype + "|";
  XXH64_hash_t hash = XXH3_64bits_withSeed(bytes.data(), bytes.size(), XXH3_64bits(key_text.data(), key_text.size()));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  const fs::path cached = fs::path(options_.cache_dir) / (name + "-" + hex + ".kiln");
  std::error_code ec;
  if (fs::exists(cached, ec) && runtime::LoadedModel::load(cached.string())) return cached.string();
  fs::create_directories(options_.cache_dir, ec);
  if (ec) return io_error("cannot create the engine cache " + options_.cache_dir + ": " + ec.message());
  note("model '" + name + "': compiling " + file.string() + " (" + config.dtype + ") into " + cached.string());
  engine::EngineBuildRequest req;
  req.model_dir = file.string();
  req.output_path = cached.string() + ".tmp" + std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  req.options.matmul_format = format_of(config.dtype);
  req.options.autotune = true;
  cpu::CpuKernelTuner tuner(cpu::isa_active());
  cpu::CpuNodeEvaluator evaluator;
  engine::EngineBuildHooks hooks;
  hooks.tuner = &tuner;
  hooks.evaluator = &evaluator;
  std::vector<std::string> notes;
  hooks.note = [&](const std::string& m) { notes.push_back(m); };
  Status built = engine::build_engine(req, hooks);
  if (!built) {
    fs::remove(req.output_path, ec);
    return built;
  }
  fs::rename(req.output_path, cached, ec);
  if (ec) return io_error("cannot write " + cached.string() + ": " + ec.message());
  return cached.string();
}

Expected<std::shared_ptr<TensorModel>> ModelRepository::build(const std::string& name) {
  const fs::path model_dir = fs::path(options_.root) / name;
  ModelConfig config = model_config_default(name);
  if (fs::exists(model_dir / "config.pbtxt")) {
    KILN_ASSIGN_OR_RETURN(std::string text, read_file(model_dir / "config.pbtxt"));
    KILN_ASSIGN_OR_RETURN(config, model_config_parse(text, name));
    for (const std::string& w : config.warnings) note("model '" + name + "': " + w);
  }
  KILN_ASSIGN_OR_RETURN(std::string version, version_dir(model_dir, config));
  KILN_ASSIGN_OR_RETURN(std::string file, model_file((model_dir / version).string(), config));
  KILN_ASSIGN_OR_RETURN(std::string engine_path, engine_for(name, file, config));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::LoadedModel> engine, runtime::LoadedModel::load(engine_path));
  const ir::Graph& graph = engine->graph();
  if (!graph.has_tensor_ops()) {
    return invalid_argument(engine_path + " is an LLM engine; serve it with kiln serve ENGINE (OpenAI and KServe generate)");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<ConfigTensor> inputs, tensors_of(graph, graph.inputs(), config.max_batch_size, "input"));
  KILN_ASSIGN_OR_RETURN(std::vector<ConfigTensor> outputs, tensors_of(graph, graph.outputs(), config.max_batch_size, "output"));
  KILN_RETURN_IF_ERROR(check_tensors(config.inputs, inputs, "input", !config.inputs.empty()));
  KILN_RETURN_IF_ERROR(check_tensors(config.outputs, outputs, "output", false));
  if (config.inputs.empty()) config.inputs = inputs;
  if (config.outputs.empty()) config.outputs = outputs;
  if (config.platform.empty() && config.backend.empty()) config.platform = file.ends_with(".onnx") ? "onnxruntime_onnx" : "kiln";

  auto profiles = ir::input_profiles_from_json(engine->metadata().value("onnx", nlohmann::json::object()).value(
      "profiles", nlohmann::json()));
  if (!profiles) return profiles.status();
  std::vector<DynamicBatcher::RunFn> instances;
  for (int64_t i = 0; i < config.instance_count; ++i) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<cpu::TensorGraphRunner> runner, cpu::TensorGraphRunner::create(graph, *profiles));
    std::shared_ptr<cpu::TensorGraphRunner> shared(std::move(runner));
    instances.push_back([shared](const std::map<std::string, ir::Tensor>& in) { return shared->run(in); });
  }
  auto model = std::make_shared<TensorModel>();
  model->name = name;
  model->version = version;
  model->engine_path = engine_path;
  model->engine = std::move(engine);
  DynamicBatcher::Options bo;
  bo.model = name;
  bo.dynamic_batching = config.dynamic_batching;
  bo.max_batch_size = config.max_batch_size;
  bo.preferred_batch_sizes = config.preferred_batch_sizes;
  bo.max_queue_delay = std::chrono::microseconds(config.max_queue_delay_us);
  bo.max_queue = options_.max_queue;
  const int threads = options_.threads;
  bo.on_worker_start = [threads] { cpu::cpu_set_threads(threads); };
  RepositoryMetrics* metrics = &metrics_;
  bo.on_batch = [metrics, name](int64_t requests, int64_t rows, double seconds) {
    metrics->record_batch(name, requests, rows, seconds);
  };
  model->config = std::move(config);
  model->batcher = std::make_unique<DynamicBatcher>(std::move(bo), std::move(instances));
  return model;
}

}  // namespace kiln::server
