// ModelRepository: the models of a Triton-style model repository directory and their states.
// Each model is a directory DIR/NAME holding config.pbtxt (optional: without it the model is
// served as its engine declares, unbatched) and numbered version directories DIR/NAME/VERSION
// with model.kiln (a general engine) or model.onnx (compiled on first load into the engine cache,
// keyed by the file's content, the precision and kiln's version, and reused after). The newest
// version is served, or the one version_policy names.
//
// A model that fails to load (a bad config, a missing file, an op kiln cannot run) is
// UNAVAILABLE with the reason, and the others load regardless. load() of a loaded model reloads
// it and swaps the new version in once it is ready; unload() takes it out of service at once,
// while requests already admitted finish on the old one (they hold it).
//
// Threads: every member may be called from any thread. Models are handed out as shared_ptr, so a
// request in flight keeps its model (engine mapping, runners, batcher) alive through an unload;
// the last holder's release stops the model's batcher and joins its workers. One load or unload
// of a name at a time: another is refused while it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/backend.h"
#include "runtime/loaded_model.h"
#include "server/repository/dynamic_batcher.h"
#include "server/repository/model_config.h"
#include "server/repository/repository_metrics.h"

namespace kiln::server {

// One loaded model version, ready to run; immutable apart from its batcher's queue.
struct TensorModel {
  std::string name, version;
  ModelConfig config;   // completed from the engine: every input and output, with dims
  std::string engine_path;
  std::unique_ptr<runtime::LoadedModel> engine;
  std::unique_ptr<runtime::Backend> backend;  // the engine's target's, under the batcher's runners
  std::unique_ptr<DynamicBatcher> batcher;    // declared last: stopped before the backend and the engine go

  ~TensorModel();
};

class ModelRepository {
 public:
  struct Options {
    std::string root;       // the repository directory
    std::string cache_dir;  // compiled ONNX engines
    int threads = 0;        // compute threads of each model instance (0: all cores)
    size_t max_queue = 256; // waiting requests per model
    std::function<void(const std::string&)> log;  // one line per load, unload, warning
  };
  ModelRepository(Options options, RepositoryMetrics& metrics);

  // Loads every model directory (those whose name starts with '.' are skipped).
  void load_all();
  Status load(const std::string& name);
  Status unload(const std::string& name);

  // The ready model of that name; kNotFound when there is no such model, kInvalidArgument (with
  // its state and reason) when it is not ready or `version` is given and is not the one served.
  Expected<std::shared_ptr<TensorModel>> ready(const std::string& name, const std::string& version = "") const;

  struct Entry {
    std::string name, version;
    std::string state;   // READY, LOADING, UNLOADING or UNAVAILABLE
    std::string reason;  // why UNAVAILABLE
  };
  // Every model directory and every model that has been loaded, by name.
  std::vector<Entry> index() const;

  const Options& options() const { return options_; }

 private:
  struct Slot {
    std::shared_ptr<TensorModel> model;  // null unless READY
    std::string state = "UNAVAILABLE", reason, version;
    bool busy = false;  // a load or unload runs
  };
  Expected<std::shared_ptr<TensorModel>> build(const std::string& name);
  Expected<std::string> engine_for(const std::string& name, const std::string& model_path, const ModelConfig& config);
  void note(const std::string& line) const;

  Options options_;
  RepositoryMetrics& metrics_;
  mutable std::mutex mu_;
  std::map<std::string, Slot> slots_;
};

// A plain model directory name: not empty, no '/', not starting with '.'.
bool model_name_is_valid(const std::string& name);

}  // namespace kiln::server
