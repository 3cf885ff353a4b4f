#include "backends/cpu/memory_bandwidth.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backends/cpu/cpu_isa.h"

namespace kiln::cpu {
namespace {

__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* p, size_t n) {
  // Four independent accumulators keep several loads in flight.
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  uint64_t s = lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
  for (; i < n; ++i) s ^= p[i];
  return s;
}

uint64_t sum_scalar(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0;
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    s0 ^= p[i];
    s1 ^= p[i + 1];
  }
  if (i < n) s0 ^= p[i];
  return s0 ^ s1;
}

}  // namespace

double measure_read_bandwidth(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(uint64_t);
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(64, n * sizeof(uint64_t)));
  if (data == nullptr) return 0.0;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) data[i] = i * 0x9e3779b97f4a7c15ull;
  const bool avx2 = isa_active() != Isa::kScalar;
  std::vector<double> rates;
  volatile uint64_t sink = 0;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel reduction(^ : total)
    {
      const size_t threads = static_cast<size_t>(omp_get_num_threads());
      const size_t t = static_cast<size_t>(omp_get_thread_num());
      const size_t chunk = (n / threads) & ~size_t{15};
      const size_t begin = t * chunk, len = t + 1 == threads ? n - begin : chunk;
      total ^= avx2 ? sum_avx2(data + begin, len) : sum_scalar(data + begin, len);
    }
    sink = sink ^ total;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(static_cast<double>(n * sizeof(uint64_t)) / dt);  // first pass warms up
  }
  std::free(data);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace kiln::cpu
