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
  // Four streams (quarters of the range) read side by side, each with a software prefetch 2 KiB
  // ahead: several DRAM pages and many cache misses in flight at once, as in the decode
  // kernels, so the figure is the rate a streaming kernel can actually reach.
  const size_t q = n / 4 / 8 * 8;  // words per stream, whole cache lines
  const uint64_t* s[4] = {p, p + q, p + 2 * q, p + 3 * q};
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (size_t i = 0; i < q; i += 8) {
    for (int k = 0; k < 4; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(s[k] + i + 256), _MM_HINT_T0);
      acc[k] = _mm256_xor_si256(acc[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s[k] + i)));
      acc[k] = _mm256_xor_si256(acc[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s[k] + i + 4)));
    }
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(acc[0], acc[1]), _mm256_xor_si256(acc[2], acc[3]));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  uint64_t sum = lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
  for (size_t i = 4 * q; i < n; ++i) sum ^= p[i];
  return sum;
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
  return *std::max_element(rates.begin(), rates.end());  // the limit: the best pass
}

}  // namespace kiln::cpu
