#include "cli/demo_engine.h"

#include <cstdio>
#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tuner.h"
#include "engine/engine_builder.h"
#include "runtime/loaded_model.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

fs::file_time_type newest_file(const fs::path& dir) {
  fs::file_time_type t = fs::file_time_type::min();  // (its epoch, {}, lies in the future)
  for (const auto& e : fs::directory_iterator(dir)) t = std::max(t, e.last_write_time());
  return t;
}

}  // namespace

fs::path kiln_binary_path() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() / "kiln" : exe;
}

Expected<fs::path> demo_model_dir() {
  std::vector<fs::path> candidates = {fs::path(KILN_DEMO_MODEL_DIR), kiln_binary_path().parent_path() / "../../models/demo",
                                      fs::current_path() / "models/demo"};
  for (const auto& c : candidates) {
    if (fs::exists(c / "config.json")) return fs::weakly_canonical(c);
  }
  return not_found("no ENGINE given and the demo model (models/demo) was not found; pass an engine file");
}

bool demo_engine_is_current(const fs::path& cached, const fs::path& model_dir, const fs::path& binary) {
  std::error_code ec;
  if (!fs::exists(cached, ec)) return false;
  const fs::file_time_type built = fs::last_write_time(cached, ec);
  if (ec || built < newest_file(model_dir)) return false;
  const fs::file_time_type kiln = fs::last_write_time(binary, ec);
  return !ec && built >= kiln;
}

Expected<std::string> demo_engine(int threads) {
  KILN_ASSIGN_OR_RETURN(fs::path model_dir, demo_model_dir());
  const fs::path binary = kiln_binary_path();
  const fs::path cached = binary.parent_path() / "demo.kiln";
  if (demo_engine_is_current(cached, model_dir, binary)) {
    if (runtime::LoadedModel::load(cached.string())) return cached.string();
    std::fprintf(stderr, "kiln serve: the cached %s does not load; compiling it again\n", cached.c_str());
  }
  std::fprintf(stderr, "kiln serve: compiling the demo model %s into %s (once)\n", model_dir.c_str(), cached.c_str());
  cpu::CpuKernelTuner tuner(cpu::isa_active());
  engine::EngineBuildRequest req;
  req.model_dir = model_dir.string();
  req.output_path = cached.string() + ".tmp";
  req.options.matmul_format = ir::WeightFormat::kBF16;
  req.options.max_batch_tokens = 512;
  req.options.autotune = true;
  engine::EngineBuildHooks hooks;
  hooks.tuner = &tuner;
  // Compiled on a thread of its own: timing kernels starts OpenMP's workers, and they leave with
  // that thread instead of idling beside the serving loop's (see ServingLoop::create).
  Status built;
  std::thread([&] {
    cpu::cpu_set_threads(threads);
    try {
      built = engine::build_engine(req, hooks);
    } catch (const std::exception& e) {  // nothing may escape a thread
      built = internal_error(std::string("compiling the demo model: ") + e.what());
    }
  }).join();
  KILN_RETURN_IF_ERROR(built);
  std::error_code ec;
  fs::rename(req.output_path, cached, ec);
  if (ec) return io_error("cannot write " + cached.string() + ": " + ec.message());
  return cached.string();
}

}  // namespace kiln::cli
