// passes/pattern.h: the helpers the subgraph matchers read constants and readers with.
#include <gtest/gtest.h>

#include "passes/pattern.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(Pattern, ConstantsAreReadOnlyFromWeightsOfTheirDtype) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2});
  const ValueId v = b.constant({2, 2}, {1, 2, 3, 4});
  const ValueId ids = b.axes({-1, 3});
  ir::WeightEntry short_load = f32_weight({3}, {1, 2});  // says 3 elements, loads 2
  const ValueId bad = b.g.add_weight("short", std::move(short_load));

  EXPECT_EQ(f32_constant(b.g, v), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_FALSE(f32_constant(b.g, x));
  EXPECT_FALSE(f32_constant(b.g, ids));
  EXPECT_FALSE(f32_constant(b.g, bad));
  EXPECT_FALSE(f32_constant(b.g, ir::kNoValue));

  EXPECT_EQ(i64_constant(b.g, ids), (std::vector<int64_t>{-1, 3}));
  EXPECT_FALSE(i64_constant(b.g, v));
  EXPECT_FALSE(i64_constant(b.g, x));
}

TEST(Pattern, ScalarsAreOneElementF32Constants) {
  TensorGraphBuilder b;
  const ValueId s = b.scalar(6.0f);
  const ValueId one_by_one = b.constant({1, 1}, {0.5f});
  const ValueId pair = b.constant({2}, {6, 6});
  const ValueId zero = b.scalar(0.0f);
  EXPECT_EQ(scalar_constant(b.g, s), 6.0);
  EXPECT_EQ(scalar_constant(b.g, one_by_one), 0.5);
  EXPECT_FALSE(scalar_constant(b.g, pair));
  EXPECT_FALSE(scalar_constant(b.g, b.input("x", {})));

  EXPECT_TRUE(is_scalar(b.g, s, 6.0));
  EXPECT_TRUE(is_scalar(b.g, s, 6.000001));          // within the default relative 1e-6
  EXPECT_FALSE(is_scalar(b.g, s, 6.001));
  EXPECT_TRUE(is_scalar(b.g, s, 6.001, 1e-3));
  EXPECT_FALSE(is_scalar(b.g, pair, 6.0));
  EXPECT_TRUE(is_scalar(b.g, zero, 0.0));            // relative tolerance of zero: exact
  EXPECT_FALSE(is_scalar(b.g, b.scalar(1e-30f), 0.0));
}

TEST(Pattern, ReadersAndOtherInputs) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2});
  const ValueId c = b.scalar(2.0f);
  const ValueId once = b.node("Relu", {x});         // node 0: read by node 1 only
  const ValueId twice = b.node("Mul", {once, c});   // node 1: read by nodes 2 and 3
  const ValueId out = b.node("Add", {twice, twice});  // node 2: a graph output
  b.node("Neg", {twice});                             // node 3
  b.output(out);
  EXPECT_EQ(only_reader(b.g, once), 1);
  EXPECT_EQ(sole_reader(b.g, once, "Mul"), 1);
  EXPECT_EQ(sole_reader(b.g, once, "Add"), -1);
  EXPECT_EQ(only_reader(b.g, twice), -1);
  EXPECT_EQ(only_reader(b.g, out), -1) << "a graph output has a reader outside the graph";

  const ir::Node& mul = b.g.nodes()[1];
  EXPECT_EQ(other_input(mul, once), c);
  EXPECT_EQ(other_input(mul, c), once);
  EXPECT_EQ(other_input(mul, x), ir::kNoValue);
  EXPECT_EQ(other_input(b.g.nodes()[2], twice), ir::kNoValue) << "both inputs are the value";
  EXPECT_EQ(other_input(b.g.nodes()[0], x), ir::kNoValue) << "one input";
}

TEST(Pattern, AKilledNodeNoLongerReadsOrWrites) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2});
  const ValueId r = b.node("Relu", {x});
  b.output(b.node("Neg", {r}));
  std::vector<bool> dead(b.g.nodes().size(), false);
  kill_node(b.g, 0, dead);
  EXPECT_TRUE(dead[0]);
  EXPECT_FALSE(dead[1]);
  EXPECT_TRUE(b.g.nodes()[0].inputs.empty());
  EXPECT_TRUE(b.g.nodes()[0].outputs.empty());
  EXPECT_TRUE(b.g.consumers(x).empty());
  EXPECT_EQ(b.g.producer(r), -1);
  EXPECT_EQ(b.g.nodes().size(), 2u) << "erase_nodes removes it later";
}

}  // namespace
}  // namespace kiln::passes
