// passes/fuse_silu_mul.cpp: split(x) -> (a, b); silu(a) * b becomes silu_mul(x) when the halves
// are equal and a, silu(a) and b have no other readers.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

// x [T, 2 * half] -> split -> silu(a) * b (or b * silu(a)).
Graph swiglu_graph(int64_t first, int64_t second, bool silu_first) {
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, first + second});
  g.inputs() = {x};
  const auto ab = g.add_node("split", "gate_up.split", {x}, {{"sizes", std::vector<int64_t>{first, second}}}, 2);
  const ValueId s = g.add_node1("silu", "act", {ab[0]});
  const std::vector<ValueId> factors = silu_first ? std::vector<ValueId>{s, ab[1]} : std::vector<ValueId>{ab[1], s};
  g.outputs() = {g.add_node1("mul", "gate_mul", factors)};
  return g;
}

TEST(FuseSiluMul, SplitSiluMulBecomesOneNode) {
  for (const bool silu_first : {true, false}) {
    Graph g = swiglu_graph(6, 6, silu_first);
    const ValueId x = g.inputs()[0], out = g.outputs()[0];
    ASSERT_TRUE(run_fuse_silu_mul(g, {}));
    EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
    ASSERT_EQ(g.nodes().size(), 1u);
    EXPECT_EQ(g.nodes()[0].op, "silu_mul");
    EXPECT_EQ(g.nodes()[0].inputs, std::vector<ValueId>{x});
    EXPECT_EQ(g.nodes()[0].outputs, std::vector<ValueId>{out});
    EXPECT_EQ(g.value(out).shape, (std::vector<int64_t>{kTokens, 6}));
  }
}

TEST(FuseSiluMul, SwigluAfterSiblingFusionFusesIntoSiluMul) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fuse_sibling_matmuls(g, {}));
  ASSERT_TRUE(run_fuse_silu_mul(g, {}));
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  EXPECT_EQ(count_op(g, "silu_mul"), 1u);
  EXPECT_EQ(count_op(g, "silu"), 0u);
  EXPECT_EQ(count_op(g, "mul"), 0u);
  EXPECT_EQ(count_op(g, "split"), 1u);  // only the q/k/v split is left
  const ir::Node* act = only_node(g, "silu_mul");
  ASSERT_NE(act, nullptr);
  EXPECT_EQ(act->inputs, node_named(g, "gate+up")->outputs);
}

TEST(FuseSiluMul, SwigluIsLeftAloneWhenTheGateHasAnotherReader) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fuse_sibling_matmuls(g, {}));
  // A second reader of silu(gate) makes the fusion wrong; the pass must not fire.
  const ValueId s = g.find_value("act");
  ValueId extra = g.add_node1("add", "extra", {s, s});
  g.outputs().push_back(extra);
  const std::string before = snapshot(g);
  ASSERT_TRUE(run_fuse_silu_mul(g, {}));
  EXPECT_EQ(count_op(g, "silu_mul"), 0u);
  EXPECT_EQ(snapshot(g), before);
}

TEST(FuseSiluMul, UnequalHalvesOrAnUpHalfReadElsewhereStay) {
  {
    Graph g = swiglu_graph(4, 8, true);  // silu_mul halves its input
    const std::string before = snapshot(g);
    ASSERT_TRUE(run_fuse_silu_mul(g, {}));
    EXPECT_EQ(snapshot(g), before);
  }
  {
    Graph g = swiglu_graph(6, 6, true);
    g.outputs().push_back(g.nodes()[0].outputs[1]);  // b is a graph output too
    const std::string before = snapshot(g);
    ASSERT_TRUE(run_fuse_silu_mul(g, {}));
    EXPECT_EQ(snapshot(g), before);
  }
}

}  // namespace
}  // namespace kiln::passes
