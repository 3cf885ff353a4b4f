// The f32 products of general graphs on BERT-base's shapes (hidden 768, intermediate 3072) at
// 128 and 1024 rows (batch 1 and 8 at sequence 128): the packed-panel tiles (gemm_packed.h)
// against the f32 matmul kernel of the LLM path over the same weight as [N, K] rows, which
// general graphs ran before the build packed their weights. Reports GFLOP/s. The packed kernel
// runs twice: over one weight that stays in cache, and over copies of it that together exceed
// the caches (256 MiB), one after the other, as a model's layers come from memory.
// Threads: OMP_NUM_THREADS (default: all cores).
//
//   bench_gemm_packed --benchmark_filter=packed
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul/gemm_packed.h"
#include "backends/cpu/matmul/matmul.h"
#include "ir/packed_weight.h"
#include "ir/tensor.h"
#include "bench_random.h"

namespace {

using kiln::bench::random_floats;

namespace ir = kiln::ir;

struct Shape {
  const char* what;
  int64_t n, k;
};
constexpr Shape kShapes[] = {{"qkv_o", 768, 768}, {"up", 3072, 768}, {"down", 768, 3072}};

ir::Tensor aligned_copy(const std::vector<float>& v) {
  ir::Tensor t(ir::DType::kF32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.mutable_data<float>());
  return t;
}

enum class Kind { kRows, kPacked, kPackedCold };

void run(benchmark::State& state, const Shape& s, int64_t m, Kind kind) {
  // x, the packed panels and y start on a cache line, as an engine's tensors do (a std::vector
  // this large starts 16 bytes past a page, which splits every 64-byte panel load in two).
  const ir::Tensor x = aligned_copy(random_floats(static_cast<size_t>(m * s.k), 1));
  const std::vector<float> wt = random_floats(static_cast<size_t>(s.n * s.k), 2);
  const std::vector<float> bias = random_floats(static_cast<size_t>(s.n), 3);
  const int64_t packed_floats = ir::packed_panels(s.n) * s.k * ir::kPackedPanel;
  const int64_t copies =
      kind == Kind::kPackedCold ? std::max<int64_t>(2, (int64_t{256} << 20) / (4 * packed_floats)) : 1;
  std::vector<ir::Tensor> p;
  for (int64_t c = 0; c < copies; ++c) {
    p.emplace_back(ir::DType::kF32, std::vector<int64_t>{packed_floats});
    ir::pack_weight_rows(wt.data(), s.n, s.k, p.back().mutable_data<float>());
  }
  size_t next = 0;
  ir::Tensor y(ir::DType::kF32, {m * s.n});
  const kiln::cpu::MatmulKernel* kernel =
      kiln::cpu::matmul_kernels(ir::WeightFormat::kF32, kiln::cpu::isa_active()).front();
  for (auto _ : state) {
    if (kind != Kind::kRows) {
      kiln::cpu::gemm_packed_f32(x.data<float>(), m, s.k, p[next].data<float>(), s.n, bias.data(),
                                 y.mutable_data<float>(), ir::Epilogue{});
      next = (next + 1) % p.size();
    } else {
      kiln::cpu::matmul(*kernel, x.data<float>(), m, s.k, reinterpret_cast<const std::byte*>(wt.data()), s.n,
                        bias.data(), y.mutable_data<float>());
    }
    benchmark::DoNotOptimize(y.mutable_data<float>());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * s.n * s.k) * state.iterations(),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  if (kind == Kind::kRows) state.SetLabel(std::string(kernel->name));
}

const bool registered = [] {
  for (const Shape& s : kShapes) {
    for (int64_t m : {128, 1024}) {
      for (Kind kind : {Kind::kRows, Kind::kPacked, Kind::kPackedCold}) {
        const char* what = kind == Kind::kRows ? "rows/" : kind == Kind::kPacked ? "packed/" : "packed_cold/";
        const std::string name = std::string(what) + s.what + "/m" + std::to_string(m);
        benchmark::RegisterBenchmark(name.c_str(), [s, m, kind](benchmark::State& st) { run(st, s, m, kind); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
