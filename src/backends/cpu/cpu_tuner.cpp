#include "backends/cpu/cpu_tuner.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/matmul.h"

namespace kiln::cpu {

std::string CpuKernelTuner::target() const { return cpu_target_name(isa_); }

std::vector<std::string> CpuKernelTuner::matmul_candidates(ir::WeightFormat format) const {
  // The scalar reference kernels are timed only where nothing else runs: they never win
  // against a SIMD kernel and take seconds at the prefill shape.
  std::vector<std::string> names, scalar;
  for (const MatmulKernel* k : matmul_kernels(format, isa_)) {
    (k->isa == Isa::kScalar ? scalar : names).emplace_back(k->name);
  }
  return names.empty() ? scalar : names;
}

std::string CpuKernelTuner::matmul_results_class(const std::string& kernel) const {
  const MatmulKernel* kern = matmul_kernel_find(kernel);
  return kern == nullptr ? kernel : cpu::matmul_results_class(*kern);
}

double CpuKernelTuner::time_matmul(const std::string& kernel, ir::WeightFormat format, int64_t m, int64_t n,
                                   int64_t k) {
  const MatmulKernel* kern = matmul_kernel_find(kernel);
  if (kern == nullptr) return 1e30;
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (auto& v : w) v = dist(rng);
  for (auto& v : x) v = dist(rng);
  std::vector<std::byte> packed(static_cast<size_t>(n) * ir::weight_format_row_bytes(format, k));  // any layout
  ir::weight_quantize(format, w.data(), n, k, packed.data());
  w.clear();
  w.shrink_to_fit();
  // One warm-up, then at least 5 runs, more while they take under 0.1 s in all (at most 30). The
  // minimum, not the median: a build often shares the machine, and a run that another process
  // interrupted is only ever slower, while the fastest run is the kernel's own time.
  matmul(*kern, x.data(), m, k, packed.data(), n, nullptr, y.data());
  double best = 1e30, total = 0.0;
  for (int run = 0; run < 30 && (run < 5 || total < 0.1); ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul(*kern, x.data(), m, k, packed.data(), n, nullptr, y.data());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
    total += dt;
  }
  return best;
}

}  // namespace kiln::cpu
