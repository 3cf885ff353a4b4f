// kiln eval ENGINE --input NAME=FILE.npy [--input ...] --outputs-dir DIR [--repeat N]
// Runs a general (ONNX) engine once on NumPy inputs and writes each output as DIR/NAME.npy;
// --repeat N then runs it N more times on the same inputs and prints the mean and best latency.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/tensor/tensor_graph_runner.h"
#include "cli/commands.h"
#include "cli/npy.h"

namespace kiln::cli {

int run_eval_tensors(const std::string& engine, const std::vector<std::string>& inputs,
                     const std::string& outputs_dir, int threads, int repeat) {
  if (outputs_dir.empty()) return fail(invalid_argument("--outputs-dir is required with --input"));
  std::map<std::string, ir::Tensor> feed;
  for (const std::string& spec : inputs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return fail(invalid_argument("--input '" + spec + "' must be NAME=FILE.npy"));
    }
    auto t = npy_read(spec.substr(eq + 1));
    if (!t) return fail(t.status().with_context("input '" + spec.substr(0, eq) + "'"));
    feed[spec.substr(0, eq)] = std::move(*t);
  }
  cpu::cpu_set_threads(threads);
  auto model = runtime::LoadedModel::load(engine);
  if (!model) return fail(model.status());
  if (!(*model)->graph().has_tensor_ops()) {
    return fail(invalid_argument(engine + " is an LLM engine; run it with --ids or --text"));
  }
  auto profiles = ir::input_profiles_from_json((*model)->metadata().value("onnx", nlohmann::json::object()).value(
      "profiles", nlohmann::json()));
  if (!profiles) return fail(profiles.status());
  auto runner = cpu::TensorGraphRunner::create((*model)->graph(), std::move(*profiles));
  if (!runner) return fail(runner.status());
  auto outputs = (*runner)->run(feed);
  if (!outputs) return fail(outputs.status());
  ::mkdir(outputs_dir.c_str(), 0755);
  for (const auto& [name, t] : *outputs) {
    std::string file = name;
    for (char& c : file) {
      if (c == '/' || c == '\\') c = '_';
    }
    const std::string path = outputs_dir + "/" + file + ".npy";
    Status st = npy_write(path, t);
    if (!st) return fail(st);
    std::printf("%s: %s %s -> %s\n", name.c_str(), std::string(ir::dtype_name(t.dtype())).c_str(),
                ir::shape_to_string(t.shape()).c_str(), path.c_str());
  }
  if (repeat > 0) {
    double total = 0.0, best = 0.0;
    for (int i = 0; i < repeat; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto again = (*runner)->run(feed);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!again) return fail(again.status());
      total += ms;
      best = i == 0 ? ms : std::min(best, ms);
    }
    std::printf("latency over %d runs: mean %.2f ms, best %.2f ms (%d threads)\n", repeat, total / repeat, best,
                cpu::cpu_threads());
  }
  return 0;
}

}  // namespace kiln::cli
