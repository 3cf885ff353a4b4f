#include "cli/bench_serve/arrival_schedule.h"

#include <cmath>
#include <random>
#include <string>

namespace kiln::cli::bench_serve {

Expected<std::vector<double>> arrival_schedule(int64_t n, double rate, double burstiness, uint64_t seed) {
  if (n < 0) return invalid_argument("the number of requests must be >= 0");
  if (!(rate > 0)) return invalid_argument("--request-rate must be > 0 (or inf), got " + std::to_string(rate));
  if (!(burstiness > 0) || std::isinf(burstiness)) {
    return invalid_argument("--burstiness must be a finite number > 0, got " + std::to_string(burstiness));
  }
  std::vector<double> offsets(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return offsets;
  // Gamma(shape k, scale theta) has mean k * theta; theta = 1 / (rate * k) gives mean 1 / rate.
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0.0;
  for (auto& offset : offsets) {
    t += gap(rng);
    offset = t;
  }
  return offsets;
}

}  // namespace kiln::cli::bench_serve
