// The `kiln` binary: one entry point, one file per subcommand (cmd_*.cpp). Each subcommand
// registers its options on a CLI11 app and returns a process exit code; user errors print one
// line to stderr and return 1, never abort.
#pragma once

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "backends/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "runtime/loaded_model.h"

namespace kiln::cli {

int main(int argc, char** argv);

// Each subcommand adds itself to `app` and returns the function that runs it once parsed.
using CommandFn = std::function<int()>;
CommandFn add_build_command(CLI::App& app);
CommandFn add_eval_command(CLI::App& app);
CommandFn add_inspect_command(CLI::App& app);
CommandFn add_bench_command(CLI::App& app);
CommandFn add_bench_serve_command(CLI::App& bench);  // `kiln bench serve`, under the bench command
CommandFn add_random_checkpoint_command(CLI::App& app);
CommandFn add_run_command(CLI::App& app);
CommandFn add_serve_command(CLI::App& app);
CommandFn add_tokenize_command(CLI::App& app);

CommandFn add_check_command(CLI::App& app);

// `kiln eval` of a general (ONNX) engine: inputs "NAME=FILE.npy", outputs DIR/NAME.npy; `repeat`
// more runs are timed.
int run_eval_tensors(const std::string& engine, const std::vector<std::string>& inputs,
                     const std::string& outputs_dir, int threads, int repeat = 0);

// Prints "kiln: <message>" to stderr and returns 1.
int fail(const Status& status);

// An engine loaded and ready to run on the backend its target names (cpu-*: the CPU backend
// with `threads` threads; cuda-*: the CUDA backend on GPU 0, when this kiln has it), with a KV
// cache of `kv_tokens` positions, elements of `kv_dtype`, in that backend's memory.
struct Session {
  std::unique_ptr<runtime::LoadedModel> model;
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::Executor> executor;
  std::unique_ptr<runtime::KvCache> cache;
  std::string device;  // "cpu (N threads)" or the GPU's name
};
// kv_dtype: the cache's element; nullopt, the model's own (LoadedModel::native_kv_cache_dtype).
Expected<Session> open_session(const std::string& engine_path, int threads, int64_t kv_tokens,
                               std::optional<runtime::KvCacheDtype> kv_dtype = runtime::KvCacheDtype::kF32);

// The KV pool for --gpu-memory-fraction: what the share `fraction` of the GPU's memory leaves
// once the loaded cuda engine's weights, activations and scratch are on it. `manual_flag` names
// the flag that sizes the pool by hand instead; `manual_given`: it was given too (an error).
Expected<uint64_t> gpu_kv_cache_bytes(const runtime::LoadedModel& model, double fraction,
                                      const std::string& manual_flag, bool manual_given);

// Parses "1,2,3" into ids.
Expected<std::vector<int32_t>> parse_id_list(const std::string& text);

}  // namespace kiln::cli
