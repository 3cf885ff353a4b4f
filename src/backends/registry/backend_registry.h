// The backend registry: what each target name maps to. An engine's target (its header's
// "cpu-avx512", "cuda-sm90", ...) names the backend that runs it; a `kiln build --target` ("cpu"
// or "cuda") names the kernel tuner that compiles for it. This is the one module above both
// backends, so that kiln build, run, bench, eval and serve and the model repository choose them
// in one place, and nothing else needs to know which backends this kiln was built with.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "passes/pass.h"
#include "runtime/backend.h"

namespace kiln::backends {

struct OpenedBackend {
  std::unique_ptr<runtime::Backend> backend;
  std::string device;  // "cpu (N threads)" or the GPU's name
};

// The backend for an engine built for `engine_target`: the CPU backend for cpu-* (with an OpenMP
// team of `threads`, 0 = all cores, also set on the calling thread), the CUDA backend on GPU 0
// for cuda-*. Fails with what to do when this kiln has no CUDA backend or the GPU is missing.
Expected<OpenedBackend> open_backend(const std::string& engine_target, int threads);

// The kernel tuner of a build for `build_target` ("cpu" or "cuda"). `autotune`: time candidate
// kernels on this machine; a cuda build on a machine with no usable GPU takes each list's first
// kernel instead, says so on stderr and clears `autotune`.
Expected<std::unique_ptr<passes::KernelTuner>> make_kernel_tuner(const std::string& build_target, bool& autotune);

// Constant folding's evaluator for general graphs (the CPU's tensor kernels, for every target).
std::unique_ptr<passes::NodeEvaluator> make_node_evaluator();

}  // namespace kiln::backends
