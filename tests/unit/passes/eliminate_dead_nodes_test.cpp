// passes/eliminate_dead_nodes.cpp: nodes none of whose outputs reach a graph output go, then the
// weights nothing reads any more.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(EliminateDeadNodes, DeadNodesAreRemoved) {
  Graph g = decoder_like();
  const ValueId x = g.inputs()[0];
  ValueId w = g.add_weight("unused.w", counting({3, 4}, 0));
  g.add_node1("matmul", "unused", {x, w});
  ASSERT_TRUE(run_eliminate_dead_nodes(g, {}));
  for (const auto& n : g.nodes()) EXPECT_NE(n.name, "unused");
  EXPECT_EQ(g.weights().count("unused.w"), 0u);
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
}

TEST(EliminateDeadNodes, AWholeDeadChainGoesAndTheLiveGraphStays) {
  Graph g = decoder_like();
  const std::string live = snapshot(g);
  // attn -> norm -> silu, read by nothing: both go, though the norm's output has a reader.
  const ValueId a = g.find_value("attn");
  const ValueId norm = g.add_node1("rms_norm", "dead.norm", {a, g.add_weight("dead.norm.w", counting({4}, 1))});
  g.add_node1("silu", "dead.act", {norm});
  ASSERT_TRUE(run_eliminate_dead_nodes(g, {}));
  EXPECT_EQ(node_named(g, "dead.norm"), nullptr);
  EXPECT_EQ(node_named(g, "dead.act"), nullptr);
  EXPECT_EQ(g.weights().count("dead.norm.w"), 0u);
  // Node for node and weight for weight, the rest is what it was.
  EXPECT_EQ(snapshot(g), live);
}

TEST(EliminateDeadNodes, ANodeWithOneLiveOutputStaysWhole) {
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, 6});
  g.inputs() = {x};
  const auto halves = g.add_node("split", "halves", {x}, {{"sizes", std::vector<int64_t>{2, 4}}}, 2);
  g.outputs() = {g.add_node1("silu", "act", {halves[1]})};  // halves[0] is read by nothing
  const std::string before = snapshot(g);
  ASSERT_TRUE(run_eliminate_dead_nodes(g, {}));
  EXPECT_EQ(snapshot(g), before);
}

}  // namespace
}  // namespace kiln::passes
