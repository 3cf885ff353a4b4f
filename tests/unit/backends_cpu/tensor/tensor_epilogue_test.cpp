// The fused epilogue over f32 outputs (tensor_epilogue.h) on every ISA this CPU runs, against
// the double-precision definition (ir/epilogue.h): every activation, with and without a scale and
// shift, over lengths that leave every remainder of the vector loops, and through NaN, infinities
// and signed zeros.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/tensor/tensor_epilogue.h"
#include "ir/epilogue.h"
#include "unit/backends_cpu/tensor_test_util.h"

namespace kiln::cpu {
namespace {

std::vector<ir::Epilogue> every_activation() {
  std::vector<ir::Epilogue> out;
  const std::vector<std::pair<ir::Activation, std::pair<double, double>>> acts = {
      {ir::Activation::kNone, {0, 0}},        {ir::Activation::kRelu, {0, 0}},
      {ir::Activation::kLeakyRelu, {0.1, 0}}, {ir::Activation::kHardSigmoid, {0.2, 0.5}},
      {ir::Activation::kHardSwish, {0, 0}},   {ir::Activation::kClip, {-0.2, 0.3}},
      {ir::Activation::kSigmoid, {0, 0}},     {ir::Activation::kTanh, {0, 0}},
      {ir::Activation::kSwish, {1.5, 0}},     {ir::Activation::kGelu, {0, 0}}};
  for (const auto& [a, ab] : acts) {
    for (bool affine : {false, true}) {
      ir::Epilogue e;
      e.activation = a;
      e.alpha = ab.first;
      e.beta = ab.second;
      if (affine) {
        e.scale = 0.75;
        e.shift = -0.25;
      }
      if (!e.empty()) out.push_back(e);
    }
  }
  return out;
}

TEST(TensorEpilogue, MatchesTheDefinitionOnEveryIsaThroughNanInfinityAndSignedZero) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
  for (Isa isa : test_util::isas()) {
    ASSERT_TRUE(isa_override(isa).is_ok());
    for (const ir::Epilogue& e : every_activation()) {
      for (int64_t n : {1, 7, 8, 9, 16, 37}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " " + ir::activation_name(e.activation) +
                     (e.scale != 1.0 ? " affine" : "") + " n=" + std::to_string(n));
        std::vector<float> y(static_cast<size_t>(n));
        for (float& v : y) v = dist(rng);
        const std::vector<float> special = {nan, -0.0f, 0.0f, inf, -inf, -3.0f, 3.0f};
        for (size_t i = 0; i < special.size() && i < y.size(); ++i) y[y.size() - 1 - i] = special[i];
        const std::vector<float> x = y;
        apply_epilogue_f32(e, y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const double want = ir::apply_epilogue(e, x[static_cast<size_t>(i)]);
          const float got = y[static_cast<size_t>(i)];
          SCOPED_TRACE("x = " + std::to_string(x[static_cast<size_t>(i)]));
          ASSERT_EQ(std::isnan(got), std::isnan(want));
          if (std::isnan(want)) continue;
          if (std::isinf(want)) {
            EXPECT_EQ(got, static_cast<float>(want));
            continue;
          }
          EXPECT_LE(std::fabs(got - want), 2e-6 * (1.0 + std::fabs(want)));
        }
      }
    }
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
}

// Gelu's AVX-512 loop runs the AVX2 loop's operations 16 lanes at a time: the same bits.
TEST(TensorEpilogue, GeluIsTheSameBitsOnAvx512AndAvx2) {
  if (!isa_override(Isa::kAvx512).is_ok()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  std::vector<float> x(1003);
  for (float& v : x) v = dist(rng);
  x[0] = -0.0f;
  x[1] = 1e-30f;
  ir::Epilogue e;
  e.activation = ir::Activation::kGelu;
  e.scale = 0.75;
  e.shift = -0.25;
  std::vector<float> wide = x, narrow = x;
  apply_epilogue_f32(e, wide.data(), static_cast<int64_t>(wide.size()));
  ASSERT_TRUE(isa_override(Isa::kAvx2).is_ok());
  apply_epilogue_f32(e, narrow.data(), static_cast<int64_t>(narrow.size()));
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(wide[i]), std::bit_cast<uint32_t>(narrow[i])) << i << " x = " << x[i];
  }
}

}  // namespace
}  // namespace kiln::cpu
