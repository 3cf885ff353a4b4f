// Shared pieces of the general-graph kernel tests: running one node, comparing two tensors, and
// the ISAs this CPU can run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu::test_util {

// The node's first output on `in`, failing the test if the kernel refuses.
inline ir::Tensor run(const ir::Node& n, const std::vector<const ir::Tensor*>& in) {
  std::vector<ir::Tensor> out;
  const Status st = tensor_run_node(n, in, out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out.empty() ? ir::Tensor() : std::move(out[0]);
}

// f32 values uniform in [-1, 1) of `shape`, from `seed`.
inline ir::Tensor random_f32(const ir::Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  ir::Tensor t(ir::DType::kF32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

// Largest |got - want| / (1 + |want|).
inline double worst(const ir::Tensor& got, const ir::Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  double w = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double a = ir::tensor_get_f64(got, i), b = ir::tensor_get_f64(want, i);
    w = std::max(w, std::fabs(a - b) / (1.0 + std::fabs(b)));
  }
  return w;
}

// Every ISA this CPU runs, from the best down.
inline std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kScalar}) {
    if (isa_override(isa).is_ok()) out.push_back(isa);
  }
  EXPECT_TRUE(isa_override(std::nullopt).is_ok());
  return out;
}

}  // namespace kiln::cpu::test_util
