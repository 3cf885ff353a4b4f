// The CUDA side of kernel selection at build time (`kiln build --target cuda`): lists the CUDA
// matmul kernels for a weight format and row count (cuda_matmul.h) and, on a machine with a
// Hopper GPU, times them there (CUDA events, median of several runs, random weights). Without
// a GPU it only lists them, and the build takes each list's first kernel. Plain C++ header.
#pragma once

#include <memory>

#include "passes/pass.h"

namespace kiln::cuda {

class CudaKernelTuner final : public passes::KernelTuner {
 public:
  // A tuner that times on GPU 0 when `time_on_gpu` (failing if there is no supported GPU),
  // or one that only lists kernels.
  static Expected<std::unique_ptr<CudaKernelTuner>> create(bool time_on_gpu);
  ~CudaKernelTuner() override;

  std::string target() const override;
  std::string device_name() const override { return device_name_; }
  std::vector<std::string> matmul_candidates(ir::WeightFormat format) const override;
  std::vector<std::string> matmul_candidates_for(ir::WeightFormat format, int64_t m) const override;
  double time_matmul(const std::string& kernel, ir::WeightFormat format, int64_t m, int64_t n, int64_t k) override;

 private:
  struct Gpu;
  CudaKernelTuner() = default;
  std::string device_name_;
  std::unique_ptr<Gpu> gpu_;  // null: no timing
};

}  // namespace kiln::cuda
