// The f32 convolution product (conv_gemm.h) on the shapes of PaddleOCR v4 recognition's 1x1
// convolutions (batch 1, 48 x 320 input): output channels M, input channels K, output positions
// P, with a HardSwish epilogue. Each shape runs on this CPU's best ISA and on the portable loops
// (the baseline: what AVX2 machines ran before their own tiles). Reports GFLOP/s.
// Threads: OMP_NUM_THREADS (default: all cores).
//
//   bench_conv_gemm --benchmark_filter=480x
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/vision/conv_gemm.h"
#include "bench_random.h"

namespace {

using kiln::bench::random_floats;

struct Shape {
  int64_t M, K, P;
};
constexpr Shape kShapes[] = {{64, 64, 3840}, {128, 128, 960}, {240, 240, 240}, {480, 240, 240}, {480, 480, 80}};

void run(benchmark::State& state, const Shape& s, bool portable) {
  if (portable && !kiln::cpu::isa_override(kiln::cpu::Isa::kScalar).is_ok()) state.SkipWithError("no scalar ISA");
  const std::vector<float> w = random_floats(static_cast<size_t>(s.M * s.K), 1);
  const std::vector<float> x = random_floats(static_cast<size_t>(s.K * s.P), 2);
  const std::vector<float> bias = random_floats(static_cast<size_t>(s.M), 3);
  std::vector<float> y(static_cast<size_t>(s.M * s.P));
  kiln::ir::Epilogue ep;
  ep.activation = kiln::ir::Activation::kHardSwish;
  kiln::cpu::ConvGemmShape shape;
  shape.M = s.M;
  shape.K = s.K;
  shape.P = s.P;
  shape.in_sp = s.P;
  for (auto _ : state) {
    kiln::cpu::conv_gemm_f32(w.data(), bias.data(), x.data(), nullptr, y.data(), shape, ep);
    benchmark::DoNotOptimize(y.data());
  }
  (void)kiln::cpu::isa_override(std::nullopt);
  state.SetLabel(std::string(kiln::cpu::isa_name(portable ? kiln::cpu::Isa::kScalar : kiln::cpu::isa_active())));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(s.M * s.K * s.P) * state.iterations(),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

const bool registered = [] {
  for (const Shape& s : kShapes) {
    for (bool portable : {true, false}) {
      const std::string name = std::string(portable ? "portable/" : "best/") + std::to_string(s.M) + "x" +
                               std::to_string(s.K) + "/P" + std::to_string(s.P);
      benchmark::RegisterBenchmark(name.c_str(), [s, portable](benchmark::State& st) { run(st, s, portable); })
          ->UseRealTime();
    }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
