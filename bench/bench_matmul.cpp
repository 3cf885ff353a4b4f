// Matmul kernels on the TinyLlama-1.1B shapes (hidden 2048, intermediate 5632, vocab 32000):
// every kernel this CPU can run, at m = 1 (decode: reports GB/s of weights streamed) and m = 512
// (prefill: reports GFLOP/s). A streaming-read baseline over 1 GiB gives the machine's memory
// bandwidth in the same run, so decode rates can be read as a fraction of the physical limit.
//
// Decode weights rotate over enough copies to exceed the last-level cache (as a whole model
// does), so m = 1 numbers are DRAM numbers. Threads: OMP_NUM_THREADS (default: all cores).
// Scalar kernels only run at m = 1 (a prefill call takes them tens of seconds).
//
//   bench_matmul --benchmark_filter='i4g32|Bandwidth'
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul/matmul.h"
#include "ir/weight_format.h"

namespace {

using kiln::cpu::MatmulKernel;
namespace ir = kiln::ir;

struct Shape {
  const char* what;
  int64_t n, k;
};
constexpr Shape kShapes[] = {
    {"qkv", 2560, 2048}, {"o", 2048, 2048}, {"gate_up", 11264, 2048}, {"down", 2048, 5632}, {"lm_head", 32000, 2048},
};
constexpr size_t kDecodeBytes = size_t{256} << 20;  // > any last-level cache

// Stored weights for one (format, shape): `copies` identical copies back to back.
struct Weights {
  std::vector<std::byte> data;
  size_t bytes = 0;  // one copy
  int copies = 1;
};

const Weights& weights(ir::WeightFormat format, const Shape& s, bool many_copies) {
  static std::map<std::tuple<int, int64_t, int64_t, bool>, std::unique_ptr<Weights>> cache;
  const auto key = std::make_tuple(static_cast<int>(format), s.n, s.k, many_copies);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  cache.clear();  // keep one set alive: the lm_head weights alone are 260 MB in f32
  auto w = std::make_unique<Weights>();
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> f(static_cast<size_t>(s.n * s.k));
  for (float& v : f) v = dist(rng);
  w->bytes = static_cast<size_t>(s.n) * ir::weight_format_row_bytes(format, s.k);
  w->copies = many_copies ? static_cast<int>(std::max<size_t>(1, (kDecodeBytes + w->bytes - 1) / w->bytes)) : 1;
  w->data.resize(w->bytes * static_cast<size_t>(w->copies));
  ir::weight_quantize(format, f.data(), s.n, s.k, w->data.data());
  for (int c = 1; c < w->copies; ++c) std::memcpy(w->data.data() + c * w->bytes, w->data.data(), w->bytes);
  return *cache.emplace(key, std::move(w)).first->second;
}

void bm_matmul(benchmark::State& state, const MatmulKernel* kernel, Shape s, int64_t m) {
  const bool decode = m == 1;
  const Weights& w = weights(kernel->format, s, decode);
  std::vector<float> x(static_cast<size_t>(m * s.k)), y(static_cast<size_t>(m * s.n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  int copy = 0;
  for (auto _ : state) {
    kiln::cpu::matmul(*kernel, x.data(), m, s.k, w.data.data() + static_cast<size_t>(copy) * w.bytes, s.n, nullptr,
                      y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    copy = (copy + 1) % w.copies;
  }
  using benchmark::Counter;
  state.counters["GB/s"] = Counter(static_cast<double>(w.bytes) / 1e9, Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      Counter(2.0 * static_cast<double>(m * s.n * s.k) / 1e9, Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(s.what) + " threads=" + std::to_string(omp_get_max_threads()));
}

// Sums 1 GiB of floats on all OpenMP threads: the rate a decode kernel can at best stream at.
void bm_bandwidth(benchmark::State& state) {
  const size_t count = size_t{1} << 28;
  static std::vector<float> data(count, 1.0f);
  double total = 0.0;
  for (auto _ : state) {
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t c = 0; c < static_cast<int64_t>(count / 4096); ++c) {
      const float* p = data.data() + c * 4096;
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
      for (int i = 0; i < 4096; i += 8) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
        s4 += p[i + 4];
        s5 += p[i + 5];
        s6 += p[i + 6];
        s7 += p[i + 7];
      }
      sum += static_cast<double>(((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)));
    }
    total += sum;
    benchmark::DoNotOptimize(total);
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(count * sizeof(float)) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("threads=" + std::to_string(omp_get_max_threads()));
}

void register_all() {
  benchmark::RegisterBenchmark("Bandwidth/stream_read_1GiB", bm_bandwidth)->UseRealTime()->Unit(benchmark::kMillisecond);
  const kiln::cpu::Isa isa = kiln::cpu::isa_active();
  for (const MatmulKernel* kernel : kiln::cpu::matmul_kernels_all()) {
    if (kernel->isa > isa) continue;
    for (const Shape& s : kShapes) {
      for (int64_t m : {int64_t{1}, int64_t{512}}) {
        if (m > 1 && kernel->isa == kiln::cpu::Isa::kScalar) continue;
        const std::string name = "Matmul/" + std::string(kernel->name) + "/m=" + std::to_string(m) + "/n=" +
                                 std::to_string(s.n) + "/k=" + std::to_string(s.k);
        benchmark::RegisterBenchmark(name.c_str(), bm_matmul, kernel, s, m)
            ->UseRealTime()
            ->Unit(m == 1 ? benchmark::kMicrosecond : benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
