#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ir/ops.h"
#include "ir/tensor_ops.h"
#include "nlohmann/json.hpp"

namespace kiln::ir {
namespace {

WeightEntry weight_of(std::vector<int64_t> shape) {
  WeightEntry w;
  w.shape = std::move(shape);
  w.load = [n = w.shape] {
    int64_t count = 1;
    for (int64_t d : n) count *= d;
    return Expected<std::vector<float>>(std::vector<float>(static_cast<size_t>(count), 1.0f));
  };
  return w;
}

// x [T, 8] -> matmul(w [4, 8]) -> rms_norm -> output
Graph small_graph() {
  Graph g;
  ValueId x = g.add_value("x", DType::kF32, {kTokens, 8});
  g.inputs() = {x};
  ValueId w = g.add_weight("w", weight_of({4, 8}));
  ValueId n = g.add_weight("n", weight_of({4}));
  ValueId y = g.add_node1("matmul", "proj", {x, w});
  ValueId z = g.add_node1("rms_norm", "norm", {y, n}, {{"eps", 1e-5}});
  g.outputs() = {z};
  return g;
}

TEST(IrGraph, ShapesAreInferredAndVerified) {
  Graph g = small_graph();
  EXPECT_EQ(g.value(g.outputs()[0]).shape, (std::vector<int64_t>{kTokens, 4}));
  EXPECT_TRUE(verify(g)) << verify(g).message();
}

TEST(IrGraph, VerifyNamesAMismatchedNode) {
  Graph g;
  ValueId x = g.add_value("x", DType::kF32, {kTokens, 8});
  g.inputs() = {x};
  ValueId w = g.add_weight("w", weight_of({4, 7}));  // K does not match
  g.outputs() = {g.add_node1("matmul", "bad_proj", {x, w})};
  Status st = verify(g);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("bad_proj"), std::string::npos) << st.message();
}

TEST(IrGraph, VerifyRejectsUseBeforeDefinitionAndUnknownOps) {
  Graph g = small_graph();
  std::swap(g.nodes()[0], g.nodes()[1]);
  EXPECT_FALSE(verify(g));
  Graph h = small_graph();
  h.nodes()[1].op = "frobnicate";
  Status st = verify(h);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("unknown op"), std::string::npos);
}

TEST(IrGraph, JsonRoundTripKeepsStructureAndAttributes) {
  Graph g = small_graph();
  g.value(g.outputs()[0]).arena_offset = 16;
  g.set_arena_per_token(32);
  auto back = graph_from_json(graph_to_json(g));
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(print_graph(*back), print_graph(g));
  EXPECT_EQ(back->nodes()[1].attr_float("eps"), 1e-5);
  EXPECT_EQ(back->arena_per_token(), 32);
  EXPECT_EQ(back->value(back->outputs()[0]).arena_offset, 16);
}

TEST(IrGraph, JsonWithBadContentIsAnErrorNotACrash) {
  auto j = graph_to_json(small_graph());
  j["nodes"][0]["inputs"] = {0, 99};
  EXPECT_FALSE(graph_from_json(j));
  EXPECT_FALSE(graph_from_json(nlohmann::json::parse(R"({"values": 3})")));
  auto k = graph_to_json(small_graph());
  k["weights"]["w"]["format"] = "q3_weird";
  auto r = graph_from_json(k);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("unknown format"), std::string::npos);
}

TEST(IrGraph, PrintersMentionEveryNode) {
  Graph g = small_graph();
  const std::string text = print_graph(g), dot = print_graph_dot(g);
  for (const char* name : {"proj", "norm"}) {
    EXPECT_NE(text.find(name), std::string::npos);
    EXPECT_NE(dot.find(name), std::string::npos);
  }
  EXPECT_NE(dot.find("digraph"), std::string::npos);
}

TEST(IrGraph, ReplaceUsesAndPruneWeights) {
  Graph g = small_graph();
  ValueId w2 = g.add_weight("w2", weight_of({4, 8}));
  g.replace_uses(g.find_value("w"), w2);
  g.prune_weights();
  EXPECT_EQ(g.weights().count("w"), 0u);
  EXPECT_EQ(g.weights().count("w2"), 1u);
  EXPECT_TRUE(verify(g));
}

}  // namespace
}  // namespace kiln::ir

namespace kiln::ir {
namespace {

// The guards of nodes inside If branches (tensor_ops.h): every condition must be made and equal
// its branch; a condition not made means an enclosing branch did not run.
TEST(Guards, ANodeRunsOnlyInsideTakenBranches) {
  Node n;
  n.attrs["kiln.guard"] = std::vector<int64_t>{3, 1, 7, 0};  // then-branch of value 3, else-branch of value 7
  const std::vector<Guard> guards = node_guards(n);
  ASSERT_EQ(guards.size(), 2u);
  EXPECT_EQ(guards[0].cond, 3);
  EXPECT_TRUE(guards[0].branch);
  EXPECT_FALSE(guards[1].branch);
  Tensor yes(DType::kBool, {}), no(DType::kBool, {}), unset;
  tensor_set_i64(yes, 0, 1);
  tensor_set_i64(no, 0, 0);
  const auto with = [&](const Tensor* outer, const Tensor* inner) {
    return guards_hold(guards, [=](ValueId id) { return id == 3 ? outer : inner; });
  };
  EXPECT_TRUE(with(&yes, &no));
  EXPECT_FALSE(with(&no, &no));     // the outer If took its else branch
  EXPECT_FALSE(with(&yes, &yes));   // the inner If took its then branch
  EXPECT_FALSE(with(&yes, &unset)); // the inner condition was never made
  EXPECT_FALSE(with(&yes, nullptr));
  EXPECT_TRUE(node_guards(Node{}).empty());
}

}  // namespace
}  // namespace kiln::ir
