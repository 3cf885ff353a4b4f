// Random inputs for the micro-benchmarks: normally distributed floats, reproducible by seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kiln::bench {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float stddev = 0.05f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace kiln::bench
