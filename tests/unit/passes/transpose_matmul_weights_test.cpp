// passes/transpose_matmul_weights.cpp: a MatMul's constant 2-D f32 weight [K, N] is stored as
// [N, K] rows, marked kiln.b_transposed.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(TransposeMatmulWeights, StoresTheWeightAsRowsOfItsColumns) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {5, 2});
  const ValueId w = b.constant({2, 3}, {1, 2, 3, 4, 5, 6});  // K = 2, N = 3
  const ValueId out = b.node("MatMul", {x, w});
  b.output(out);
  ASSERT_TRUE(run_transpose_matmul_weights(b.g, {}));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  ASSERT_EQ(b.g.nodes().size(), 1u);
  const ir::Node& mm = b.g.nodes()[0];
  EXPECT_EQ(mm.inputs[0], x);
  EXPECT_NE(mm.inputs[1], w);
  EXPECT_EQ(b.g.value(mm.inputs[1]).name, b.g.value(w).name + ".transposed");
  EXPECT_EQ(b.g.weight(mm.inputs[1]).shape, (std::vector<int64_t>{3, 2}));
  // Row n of the new weight is column n of the old: W[k, n] = 1 + 3k + n.
  EXPECT_EQ(load_f32(b.g, mm.inputs[1]), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(mm.attr_int("kiln.b_transposed", 0), 1);
  EXPECT_EQ(mm.outputs, std::vector<ValueId>{out});
}

TEST(TransposeMatmulWeights, KeepsTheBiasAndTheEpilogue) {
  TensorGraphBuilder b;
  const ValueId bias = b.constant({2}, {1, 2});
  const ValueId out = b.node("MatMul", {b.input("x", {5, 2}), b.constant({2, 2}, {1, 2, 3, 4}), bias},
                             {{"kiln.activation", std::string("Relu")}});
  b.output(out);
  ASSERT_TRUE(run_transpose_matmul_weights(b.g, {}));
  const ir::Node& mm = b.g.nodes()[0];
  ASSERT_EQ(mm.inputs.size(), 3u);
  EXPECT_EQ(mm.inputs[2], bias);
  EXPECT_EQ(mm.attr_str("kiln.activation"), "Relu");
  EXPECT_EQ(load_f32(b.g, mm.inputs[1]), (std::vector<float>{1, 3, 2, 4}));
}

TEST(TransposeMatmulWeights, LeavesWeightsItCannotStoreAsRows) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {5, 2});
  b.output(b.node("MatMul", {x, b.input("y", {2, 3})}));                        // an activation
  b.output(b.node("MatMul", {x, b.constant({1, 2, 3}, {1, 2, 3, 4, 5, 6})}));   // 3-D: batched
  b.output(b.node("MatMul", {x, b.g.add_weight("ids", i64_weight({1, 2}))}));   // not f32
  b.output(b.node("MatMul", {x, b.constant({2, 3}, {1, 2, 3, 4, 5, 6})}, {{"kiln.b_transposed", int64_t{1}}}));
  b.output(b.node("Gemm", {x, b.constant({2, 3}, {1, 2, 3, 4, 5, 6})}));        // only MatMul
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_transpose_matmul_weights(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
}

}  // namespace
}  // namespace kiln::passes
