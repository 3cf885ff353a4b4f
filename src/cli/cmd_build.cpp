// kiln build MODEL_DIR|MODEL.onnx -o FILE.kiln [--target cpu|cuda] [--dtype ...] [--group N] [--max-seq-len N]
//            [--max-batch-tokens N] [--profile INPUT:MIN,OPT,MAX ...]
//            [--int8 --calib DIR [--calibrator entropy|minmax|percentile] [--calib-percentile P]]
// --target cuda packs the weights for the CUDA backend and times its kernels on this machine's GPU
// (without one, the first candidate of each list is taken), recording cuda-sm90 and the GPU name.
#include <chrono>
#include <cstdio>

#include "backends/cpu/cpu_tuner.h"
#include "backends/cpu/tensor/tensor_graph_runner.h"
#if KILN_HAVE_CUDA
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_tuner.h"
#endif
#include "cli/calibration_samples.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "engine/engine_builder.h"

namespace kiln::cli {
namespace {

struct BuildArgs {
  std::string model_dir, output, dtype = "fp32", dump_after, target = "cpu";
  bool int8 = false;
  std::string calib_dir, calibrator = "entropy";
  double calib_percentile = 99.99;
  std::vector<std::string> profiles;
  int group = 0;
  int64_t max_seq_len = 0, max_batch_tokens = 512;
  int threads = 0;
  bool no_autotune = false;
};

Expected<ir::WeightFormat> format_for(const std::string& dtype, int group) {
  if (dtype == "fp32" || dtype == "fp16" || dtype == "bf16" || dtype == "fp8") {
    if (group != 0) return invalid_argument("--group applies to int8 and int4 only");
    if (dtype == "fp8") return ir::WeightFormat::kF8E4M3;
    return dtype == "fp32" ? ir::WeightFormat::kF32 : dtype == "fp16" ? ir::WeightFormat::kF16 : ir::WeightFormat::kBF16;
  }
  if (dtype == "int8") {
    if (group == 0) return ir::WeightFormat::kI8Channel;
    if (group == 32) return ir::WeightFormat::kI8Group32;
    if (group == 128) return ir::WeightFormat::kI8Group128;
    return invalid_argument("--group for int8 must be 0 (per output channel), 32 or 128");
  }
  if (dtype == "int4") {
    if (group == 0 || group == 32) return ir::WeightFormat::kI4Group32;
    if (group == 128) return ir::WeightFormat::kI4Group128;
    return invalid_argument("--group for int4 must be 32 or 128");
  }
  return invalid_argument("--dtype must be one of fp32, bf16, fp16, fp8, int8, int4");
}

// The kernel tuner of the target: the CPU's, or the CUDA backend's (timing on the GPU when there
// is one and --no-autotune is not given).
Expected<std::unique_ptr<passes::KernelTuner>> make_tuner(const BuildArgs& a, bool& autotune) {
  if (a.target == "cpu") return std::unique_ptr<passes::KernelTuner>(new cpu::CpuKernelTuner(cpu::isa_active()));
  if (a.target != "cuda") return invalid_argument("--target must be cpu or cuda");
#if KILN_HAVE_CUDA
  bool time_on_gpu = autotune;
  if (time_on_gpu) {
    auto device = cuda::cuda_device_info(0);
    if (!device) {
      std::fprintf(stderr, "note: %s: CUDA kernels are not timed; each list's first kernel is taken\n",
                   device.status().message().c_str());
      time_on_gpu = autotune = false;
    }
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaKernelTuner> tuner, cuda::CudaKernelTuner::create(time_on_gpu));
  return std::unique_ptr<passes::KernelTuner>(std::move(tuner));
#else
  (void)autotune;
  return invalid_argument("this kiln has no CUDA backend; configure it with -DKILN_CUDA=ON to build cuda engines");
#endif
}

// --int8's calibration: the samples and the calibrator, or nullopt without --int8.
Expected<std::optional<passes::Int8Calibration>> int8_calibration(const BuildArgs& a) {
  if (!a.int8) {
    if (!a.calib_dir.empty()) return invalid_argument("--calib applies with --int8");
    return std::optional<passes::Int8Calibration>();
  }
  if (a.calib_dir.empty()) return invalid_argument("--int8 needs --calib DIR, a directory of sample inputs");
  auto calibrator = passes::calibrator_from_name(a.calibrator);
  if (!calibrator) return invalid_argument("--calibrator must be entropy, minmax or percentile");
  if (!(a.calib_percentile > 0.0 && a.calib_percentile <= 100.0)) {
    return invalid_argument("--calib-percentile must be in (0, 100]");
  }
  passes::Int8Calibration c;
  c.calibrator = *calibrator;
  c.percentile = a.calib_percentile;
  KILN_ASSIGN_OR_RETURN(c.samples, read_calibration_samples(a.calib_dir));
  return std::optional<passes::Int8Calibration>(std::move(c));
}

int run_build(const BuildArgs& a) {
  auto format = format_for(a.dtype, a.group);
  if (!format) return fail(format.status());
  auto int8 = int8_calibration(a);
  if (!int8) return fail(int8.status());
  cpu::cpu_set_threads(a.threads);
  bool autotune = !a.no_autotune;
  auto made = make_tuner(a, autotune);
  if (!made) return fail(made.status());
  passes::KernelTuner& tuner = **made;
  cpu::CpuNodeEvaluator evaluator;
  engine::EngineBuildRequest req;
  req.model_dir = a.model_dir;
  req.output_path = a.output;
  req.options.matmul_format = *format;
  req.options.max_batch_tokens = a.max_batch_tokens;
  req.options.autotune = autotune;
  req.max_seq_len = a.max_seq_len;
  req.dump_after = a.dump_after;
  req.int8 = std::move(*int8);
  for (const std::string& spec : a.profiles) {
    auto profile = ir::input_profile_parse(spec);
    if (!profile) return fail(profile.status());
    req.profiles.push_back(std::move(*profile));
  }
  ProgressBar bar;
  engine::EngineBuildHooks hooks;
  hooks.tuner = &tuner;
  hooks.evaluator = &evaluator;
  hooks.note = [&](const std::string& m) {
    bar.finish();
    std::fprintf(stderr, "note: %s\n", m.c_str());
  };
  hooks.dump = [&](const std::string& text) {
    bar.finish();
    std::fputs(text.c_str(), stdout);
  };
  hooks.progress = [&](const std::string& stage, uint64_t done, uint64_t total) { bar.update(stage, done, total); };
  const auto t0 = std::chrono::steady_clock::now();
  Status st = engine::build_engine(req, hooks);
  bar.finish();
  if (!st) return fail(st);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string device = tuner.device_name();
  const std::string precision = std::string(ir::weight_format_name(*format)) + (a.int8 ? " + int8" : "");
  std::fprintf(stderr, "built %s (%s%s, %s) in %.1f s\n", a.output.c_str(), tuner.target().c_str(),
               device.empty() ? "" : (", " + device).c_str(), precision.c_str(), secs);
  return 0;
}

}  // namespace

CommandFn add_build_command(CLI::App& app) {
  auto args = std::make_shared<BuildArgs>();
  CLI::App* cmd = app.add_subcommand("build", "Compile a Hugging Face model directory or an ONNX model into an engine file");
  cmd->add_option("model_dir", args->model_dir, "Hugging Face model directory, or a model.onnx file")->required();
  cmd->add_option("-o,--output", args->output, "engine file to write")->required();
  cmd->add_option("--target", args->target, "backend to build for: cpu (this CPU) or cuda (this machine's GPU)")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype,
                  "weight precision: fp32, bf16, fp16, fp8 (e4m3, one scale a weight), int8, int4")
      ->capture_default_str();
  cmd->add_option("--group", args->group, "quantisation group: int8 0 (per channel)|32|128, int4 32|128");
  cmd->add_option("--max-seq-len", args->max_seq_len, "longest sequence (default: the model's limit)");
  cmd->add_option("--max-batch-tokens", args->max_batch_tokens, "most tokens in one step")->capture_default_str();
  cmd->add_option("--threads", args->threads, "threads for kernel timing (default: all cores)");
  cmd->add_flag("--no-autotune", args->no_autotune, "take each format's default kernel instead of timing");
  cmd->add_option("--profile", args->profiles,
                  "ONNX: shapes one dynamic input takes, NAME:MIN,OPT,MAX such as x:1x3x32x32,1x3x32x320,8x3x32x960");
  cmd->add_flag("--int8", args->int8,
                "ONNX: run convolutions and matrix products in int8, with activation scales calibrated on --calib");
  cmd->add_option("--calib", args->calib_dir,
                  "ONNX --int8: sample inputs, DIR/*.npy (one input) or DIR/SAMPLE/INPUT_NAME.npy");
  cmd->add_option("--calibrator", args->calibrator, "ONNX --int8: entropy, minmax or percentile")->capture_default_str();
  cmd->add_option("--calib-percentile", args->calib_percentile, "ONNX --int8 --calibrator percentile: the percentile of |x| kept")
      ->capture_default_str();
  cmd->add_option("--dump-after", args->dump_after, "print the graph after this pass (or 'input', 'all')");
  return [args] { return run_build(*args); };
}

}  // namespace kiln::cli
