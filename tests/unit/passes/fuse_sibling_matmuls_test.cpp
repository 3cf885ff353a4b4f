// passes/fuse_sibling_matmuls.cpp: matmuls reading one activation become one matmul over
// row-concatenated weights and a split whose outputs are the original values.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(FuseSiblingMatmuls, FuseWithConcatenatedWeightsAndBiases) {
  Graph g = decoder_like();
  const ValueId q = g.find_value("q"), k = g.find_value("k"), v = g.find_value("v");
  ASSERT_TRUE(run_fuse_sibling_matmuls(g, {}));
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  EXPECT_EQ(count_op(g, "matmul"), 3u);  // q+k+v, gate+up, out
  EXPECT_EQ(count_op(g, "split"), 2u);
  const ir::Node* qkv = node_named(g, "q+k+v");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->op, "matmul");
  EXPECT_EQ(qkv->inputs[0], g.inputs()[0]);
  EXPECT_EQ(g.weight(qkv->inputs[1]).shape, (std::vector<int64_t>{8, 4}));
  const std::vector<float> w = load_f32(g, qkv->inputs[1]);
  const std::vector<float> bias = load_f32(g, qkv->inputs[2]);
  ASSERT_EQ(w.size(), 8u * 4u);
  ASSERT_EQ(bias.size(), 8u);
  // q's 4 rows (0..15), then k's 2 (100..107), then v's 2 (200..207).
  for (size_t i = 0; i < 32; ++i) {
    const float want = i < 16   ? static_cast<float>(i)
                       : i < 24 ? 100.0f + static_cast<float>(i - 16)
                                : 200.0f + static_cast<float>(i - 24);
    EXPECT_EQ(w[i], want) << i;
  }
  EXPECT_EQ(bias, (std::vector<float>{0, 1, 2, 3, 100, 101, 200, 201}));
  // The split hands the consumers the values they read before.
  const ir::Node* split = node_named(g, "q+k+v.split");
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->op, "split");
  EXPECT_EQ(split->inputs, qkv->outputs);
  EXPECT_EQ(split->outputs, (std::vector<ValueId>{q, k, v}));
  EXPECT_EQ(split->attr_ints("sizes"), (std::vector<int64_t>{4, 2, 2}));
  // The attention reads q, k, v as before, after the split.
  const ir::Node* attn = node_named(g, "attn");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->inputs, (std::vector<ValueId>{q, k, v}));
  // The gate and up weights (no bias) became one.
  const ir::Node* gate_up = node_named(g, "gate+up");
  ASSERT_NE(gate_up, nullptr);
  EXPECT_EQ(gate_up->inputs.size(), 2u);
  EXPECT_EQ(g.weights().count("q.w"), 0u) << "the parts are pruned";
}

TEST(FuseSiblingMatmuls, OnlyProductsOfOneActivationAndOneBiasKindFuse) {
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, 4});
  const ValueId y = g.add_value("y", DType::kF32, {kTokens, 4});
  g.inputs() = {x, y};
  const ValueId a = g.add_node1("matmul", "a", {x, g.add_weight("a.w", counting({2, 4}, 0)),
                                                 g.add_weight("a.b", counting({2}, 0))});
  const ValueId b = g.add_node1("matmul", "b", {x, g.add_weight("b.w", counting({2, 4}, 10))});  // no bias
  const ValueId c = g.add_node1("matmul", "c", {y, g.add_weight("c.w", counting({2, 4}, 20))});   // reads y
  const ValueId d = g.add_node1("matmul", "d", {x, y});  // two activations (4 x 4): not fusable
  g.outputs() = {a, b, c, d};
  const std::string before = snapshot(g);
  ASSERT_TRUE(run_fuse_sibling_matmuls(g, {}));
  EXPECT_EQ(snapshot(g), before);
}

}  // namespace
}  // namespace kiln::passes
