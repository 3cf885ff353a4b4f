#include "backends/registry/backend_registry.h"

#include <cstdio>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tuner.h"
#include "backends/cpu/tensor/tensor_graph_runner.h"
#if KILN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_tuner.h"
#endif

namespace kiln::backends {

Expected<OpenedBackend> open_backend(const std::string& engine_target, int threads) {
  OpenedBackend opened;
  if (engine_target.rfind("cuda-", 0) == 0) {
#if KILN_HAVE_CUDA
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> gpu, cuda::CudaBackend::create(0));
    opened.device = gpu->device().name;
    opened.backend = std::move(gpu);
    return opened;
#else
    return invalid_argument("the engine was built for " + engine_target +
                            ", and this kiln has no CUDA backend (configure it with -DKILN_CUDA=ON), or rebuild "
                            "the engine for the CPU with `kiln build MODEL_DIR`");
#endif
  }
  cpu::cpu_set_threads(threads);
  opened.device = "cpu (" + std::to_string(cpu::cpu_threads()) + " threads)";
  opened.backend = std::make_unique<cpu::CpuBackend>(threads);
  return opened;
}

Expected<std::unique_ptr<passes::KernelTuner>> make_kernel_tuner(const std::string& build_target, bool& autotune) {
  if (build_target == "cpu") return std::unique_ptr<passes::KernelTuner>(new cpu::CpuKernelTuner(cpu::isa_active()));
  if (build_target != "cuda") return invalid_argument("--target must be cpu or cuda");
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

std::unique_ptr<passes::NodeEvaluator> make_node_evaluator() { return std::make_unique<cpu::CpuNodeEvaluator>(); }

}  // namespace kiln::backends
