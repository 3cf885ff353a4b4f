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
  // One warm-up, then repeat until 0.2 s or 7 runs (at least 3); the median is robust to noise.
  matmul(*kern, x.data(), m, k, packed.data(), n, nullptr, y.data());
  std::vector<double> times;
  double total = 0.0;
  while (times.size() < 3 || (times.size() < 7 && total < 0.2)) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul(*kern, x.data(), m, k, packed.data(), n, nullptr, y.data());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    times.push_back(dt);
    total += dt;
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

}  // namespace kiln::cpu
