// passes/pack_matmul_weights.cpp: a transposed MatMul weight [N, K] is packed into panels of 32
// output columns, [ceil(N / 32), K, 32] (ir/packed_weight.h), marked kiln.b_packed = N.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(PackMatmulWeights, PacksRowsIntoPanelsOf32Columns) {
  // N = 40 output columns, K = 3: two panels, the second holding columns 32..39 and zeros.
  constexpr int64_t kN = 40, kK = 3;
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {5, kK});
  const ValueId wt = b.g.add_weight("w.transposed", counting({kN, kK}, 1));  // wt[n, k] = 1 + 3n + k
  const ValueId out = b.node("MatMul", {x, wt}, {{"kiln.b_transposed", int64_t{1}}});
  b.output(out);
  ASSERT_TRUE(run_pack_matmul_weights(b.g, {}));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  const ir::Node& mm = b.g.nodes()[0];
  EXPECT_FALSE(mm.has_attr("kiln.b_transposed"));
  EXPECT_EQ(mm.attr_int("kiln.b_packed", 0), kN);
  EXPECT_EQ(b.g.value(mm.inputs[1]).name, "w.transposed.packed");
  EXPECT_EQ(b.g.weight(mm.inputs[1]).shape, (std::vector<int64_t>{2, kK, 32}));
  EXPECT_EQ(b.g.weights().count("w.transposed"), 0u) << "the rows, read by nothing now, are pruned";
  const std::vector<float> packed = load_f32(b.g, mm.inputs[1]);
  ASSERT_EQ(packed.size(), size_t{2 * kK * 32});
  // Panel p, row k, lane j holds W[k, 32p + j] = wt[32p + j, k], zero past N.
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t k = 0; k < kK; ++k) {
      for (int64_t j = 0; j < 32; ++j) {
        const int64_t n = 32 * p + j;
        const float want = n < kN ? static_cast<float>(1 + 3 * n + k) : 0.0f;
        ASSERT_EQ(packed[static_cast<size_t>((p * kK + k) * 32 + j)], want) << p << " " << k << " " << j;
      }
    }
  }
}

TEST(PackMatmulWeights, LeavesWeightsThatAreNotTransposedF32Rows) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {5, 3});
  b.output(b.node("MatMul", {x, b.constant({3, 4}, std::vector<float>(12, 1.0f))}));  // not transposed
  ir::WeightEntry i8;
  i8.shape = {4, 3};
  i8.dtype = DType::kI8;
  i8.load_bytes = []() -> Expected<std::vector<std::byte>> { return std::vector<std::byte>(12); };
  b.output(b.node("MatMul", {x, b.g.add_weight("codes", std::move(i8))}, {{"kiln.b_transposed", int64_t{1}}}));
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_pack_matmul_weights(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
}

}  // namespace
}  // namespace kiln::passes
