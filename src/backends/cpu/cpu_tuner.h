// The CPU side of kernel selection at build time: lists the matmul kernels this machine can run
// for a weight format and times them on random data (see passes/select_kernels.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "passes/pass.h"

namespace kiln::cpu {

class CpuKernelTuner final : public passes::KernelTuner {
 public:
  explicit CpuKernelTuner(Isa isa) : isa_(isa) {}
  std::string target() const override;
  std::vector<std::string> matmul_candidates(ir::WeightFormat format) const override;
  std::string matmul_results_class(const std::string& kernel) const override;
  int timing_rounds() const override { return 3; }
  double time_matmul(const std::string& kernel, ir::WeightFormat format, int64_t m, int64_t n, int64_t k) override;

 private:
  // The random inputs of one shape, kept while its candidates are timed (select_kernels times
  // every candidate of a shape, in rounds, before the next shape).
  struct Problem {
    ir::WeightFormat format{};
    int64_t m = 0, n = 0, k = 0;
    std::vector<float> x, y;
    std::vector<std::byte> packed;
  };
  Problem& problem(ir::WeightFormat format, int64_t m, int64_t n, int64_t k);

  Isa isa_;
  Problem problem_;
};

}  // namespace kiln::cpu
