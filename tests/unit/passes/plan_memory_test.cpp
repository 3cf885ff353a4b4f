// passes/plan_memory.cpp: every activation of an LLM graph gets an offset (floats per token) in
// one arena; values whose lifetimes overlap never share floats, and the rest reuse space
// first-fit, each offset a multiple of 16.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(PlanMemory, AChainReusesTheBufferOfTheValueBeforeLast) {
  // x -> a -> b -> c (silu each, [T, 20]). Live ranges: x [-1, 0], a [0, 1], b [1, 2], c [2, 3]
  // (c is an output, read past the last node). Neighbours overlap, so they alternate between
  // offsets 0 and 32 (20 floats rounded up to 16s); the arena holds 32 + 20, rounded to 64.
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, 20});
  g.inputs() = {x};
  const ValueId a = g.add_node1("silu", "a", {x});
  const ValueId b = g.add_node1("silu", "b", {a});
  const ValueId c = g.add_node1("silu", "c", {b});
  g.outputs() = {c};
  ASSERT_TRUE(run_plan_memory(g, {}));
  EXPECT_EQ(g.value(x).arena_offset, 0);
  EXPECT_EQ(g.value(a).arena_offset, 32);
  EXPECT_EQ(g.value(b).arena_offset, 0);
  EXPECT_EQ(g.value(c).arena_offset, 32);
  EXPECT_EQ(g.arena_per_token(), 64);
  expect_plan_never_overlaps(g);
}

TEST(PlanMemory, AValueReadLaterKeepsItsBuffer) {
  // x -> a -> b; out = a + b ([T, 16] each): a lives until the add. b takes x's place (x is dead
  // once a is made); the sum, made while a and b are both live, takes a third place.
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, 16});
  g.inputs() = {x};
  const ValueId a = g.add_node1("silu", "a", {x});
  const ValueId b = g.add_node1("silu", "b", {a});
  const ValueId s = g.add_node1("add", "sum", {a, b});
  g.outputs() = {s};
  ASSERT_TRUE(run_plan_memory(g, {}));
  EXPECT_EQ(g.value(x).arena_offset, 0);
  EXPECT_EQ(g.value(a).arena_offset, 16);
  EXPECT_EQ(g.value(b).arena_offset, 0);   // x's range [-1, 0] ended before b's [1, 2]
  EXPECT_EQ(g.value(s).arena_offset, 32);  // a and b are both read by the node that makes it
  EXPECT_EQ(g.arena_per_token(), 48);
  expect_plan_never_overlaps(g);
}

TEST(PlanMemory, WeightsHaveNoPlaceAndAnUnreadInputStillHasOne) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fold_constants(g, {}));  // the transpose's output becomes a weight
  ASSERT_TRUE(run_plan_memory(g, {}));
  for (const auto& v : g.values()) {
    if (v.is_weight) {
      EXPECT_EQ(v.arena_offset, -1) << v.name;
    }
  }
  // positions [T] is a graph input: one float per token of space, never read, still placed.
  EXPECT_GE(g.value(g.find_value("positions")).arena_offset, 0);
  expect_plan_never_overlaps(g);
}

TEST(PlanMemory, GeneralGraphsAreNotPlanned) {
  TensorGraphBuilder b;
  b.output(b.node("Relu", {b.input("x", {2, 3})}));
  ASSERT_TRUE(run_plan_memory(b.g, {}));
  for (const auto& v : b.g.values()) EXPECT_EQ(v.arena_offset, -1) << v.name;
  EXPECT_EQ(b.g.arena_per_token(), 0);
}

}  // namespace
}  // namespace kiln::passes
