#include "cli/commands.h"

#include <cstdio>

#include "backends/registry/backend_registry.h"
#if KILN_HAVE_CUDA
#include "backends/cuda/cuda_device.h"
#endif

namespace kiln::cli {

int fail(const Status& status) {
  std::fprintf(stderr, "kiln: %s\n", status.message().c_str());
  return 1;
}

Expected<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    if (item.empty()) return invalid_argument("--ids: empty item in '" + text + "'");
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return invalid_argument("--ids: '" + item + "' is not a token id (a non-negative integer)");
    }
    pos = end + 1;
  }
  return ids;
}

Expected<uint64_t> gpu_kv_cache_bytes(const runtime::LoadedModel& model, double fraction,
                                      const std::string& manual_flag, bool manual_given) {
  if (manual_given) return invalid_argument("give --gpu-memory-fraction or " + manual_flag + ", not both");
  if (!(fraction > 0.0 && fraction <= 1.0)) return invalid_argument("--gpu-memory-fraction must be in (0, 1]");
  const std::string& target = model.file().header().target;
  if (target.rfind("cuda-", 0) != 0) {
    return invalid_argument("--gpu-memory-fraction sizes the KV cache of a cuda engine; this engine runs on " + target +
                            " (use " + manual_flag + ")");
  }
#if KILN_HAVE_CUDA
  KILN_ASSIGN_OR_RETURN(cuda::CudaMemoryInfo mem, cuda::cuda_memory_info(0));
  const double keep_free = (1.0 - fraction) * static_cast<double>(mem.total);
  if (static_cast<double>(mem.free) <= keep_free) {
    return invalid_argument("--gpu-memory-fraction " + std::to_string(fraction) + " leaves no room for a KV cache: " +
                            std::to_string(mem.free >> 20) + " MiB of " + std::to_string(mem.total >> 20) +
                            " MiB are free with the engine loaded");
  }
  return static_cast<uint64_t>(static_cast<double>(mem.free) - keep_free);
#else
  return invalid_argument("this kiln has no CUDA backend (configure it with -DKILN_CUDA=ON)");
#endif
}

Expected<Session> open_session(const std::string& engine_path, int threads, int64_t kv_tokens,
                               std::optional<runtime::KvCacheDtype> kv_dtype) {
  Session s;
  KILN_ASSIGN_OR_RETURN(s.model, runtime::LoadedModel::load(engine_path));
  auto opened = backends::open_backend(s.model->file().header().target, threads);
  if (!opened) return opened.status().with_context(engine_path);
  s.backend = std::move(opened->backend);
  s.device = std::move(opened->device);
  KILN_ASSIGN_OR_RETURN(s.executor, runtime::Executor::create(*s.model, *s.backend));
  const int64_t block = 16;
  const int64_t tokens = std::min(kv_tokens, s.model->facts().max_seq_len);
  KILN_ASSIGN_OR_RETURN(s.cache, s.executor->create_kv_cache((tokens + block - 1) / block + 1, block,
                                                            kv_dtype.value_or(s.model->native_kv_cache_dtype())));
  return s;
}

int main(int argc, char** argv) {
  CLI::App app{"kiln: compile a model into one engine file and run it"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  std::vector<std::pair<CLI::App*, CommandFn>> commands;
  auto add = [&](const char* name, CommandFn fn) { commands.emplace_back(app.get_subcommand(name), std::move(fn)); };
  add("build", add_build_command(app));
  add("eval", add_eval_command(app));
  add("inspect", add_inspect_command(app));
  add("bench", add_bench_command(app));
  CLI::App* bench = app.get_subcommand("bench");
  CommandFn bench_serve = add_bench_serve_command(*bench);
  commands.emplace(commands.begin(), bench->get_subcommand("serve"), std::move(bench_serve));  // before "bench"
  add("random-checkpoint", add_random_checkpoint_command(app));
  add("run", add_run_command(app));
  add("serve", add_serve_command(app));
  add("tokenize", add_tokenize_command(app));
  add("check", add_check_command(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, fn] : commands) {
    if (sub->parsed()) return fn();
  }
  return 2;
}

}  // namespace kiln::cli
