#include "backends/cpu/cpu_tuner.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/matmul/matmul.h"

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

CpuKernelTuner::Problem& CpuKernelTuner::problem(ir::WeightFormat format, int64_t m, int64_t n, int64_t k) {
  Problem& p = problem_;
  const bool same_weights = !p.packed.empty() && p.format == format && p.n == n && p.k == k;
  if (same_weights && p.m == m) return p;
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  if (!same_weights) {
    std::vector<float> w(static_cast<size_t>(n * k));
    for (auto& v : w) v = dist(rng);
    p.packed.assign(static_cast<size_t>(n) * ir::weight_format_row_bytes(format, k), std::byte{0});  // any layout
    ir::weight_quantize(format, w.data(), n, k, p.packed.data());
  }
  p.x.resize(static_cast<size_t>(m * k));
  for (auto& v : p.x) v = dist(rng);
  p.y.assign(static_cast<size_t>(m * n), 0.0f);
  p.format = format;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

double CpuKernelTuner::time_matmul(const std::string& kernel, ir::WeightFormat format, int64_t m, int64_t n,
                                   int64_t k) {
  const MatmulKernel* kern = matmul_kernel_find(kernel);
  if (kern == nullptr) return 1e30;
  Problem& p = problem(format, m, n, k);
  float* y = p.y.data();
  // One warm-up (the previous candidate left other data in cache), then at least 3 runs, more
  // while they take under 0.04 s in all (at most 12); select_kernels asks for timing_rounds() of
  // these. The minimum, not the median: a build often shares the machine, and a run that another
  // process interrupted is only ever slower, while the fastest run is the kernel's own time.
  matmul(*kern, p.x.data(), m, k, p.packed.data(), n, nullptr, y);
  double best = 1e30, total = 0.0;
  for (int run = 0; run < 12 && (run < 3 || total < 0.04); ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul(*kern, p.x.data(), m, k, p.packed.data(), n, nullptr, y);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
    total += dt;
  }
  return best;
}

}  // namespace kiln::cpu
