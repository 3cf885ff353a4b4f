// passes/fuse_subgraphs.cpp: HardSwish, Gelu (erf and tanh forms) and LayerNormalization as
// exporters spell them become one node each, and an Add feeding a LayerNormalization becomes
// kiln.AddLayerNorm. The numbers agree on the CPU (tests/unit/backends_cpu/fuse_graph_test.cpp);
// here, which nodes the pass takes and which it must leave.
#include <gtest/gtest.h>

#include <cmath>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

// After the pass: exactly one node, `op`, reading `inputs` and writing `output`.
void expect_single_node(const Graph& g, const std::string& op, const std::vector<ValueId>& inputs, ValueId output) {
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  ASSERT_EQ(g.nodes().size(), 1u) << ir::print_graph(g);
  const ir::Node& n = g.nodes()[0];
  EXPECT_EQ(n.op, op);
  EXPECT_EQ(n.inputs, inputs);
  EXPECT_EQ(n.outputs, std::vector<ValueId>{output});
}

// ---- HardSwish ----

enum class HardSwishForm { kDivSix, kMulSixthAfter, kMulSixthBefore };

// x * Clip(x + 3, 0, 6) / 6 in one of its spellings; `three` is the constant added to x.
struct HardSwishGraph {
  TensorGraphBuilder b;
  ValueId x, clip, out;
};

HardSwishGraph hard_swish_graph(HardSwishForm form, float three = 3.0f) {
  HardSwishGraph h;
  TensorGraphBuilder& b = h.b;
  h.x = b.input("x", {2, 8});
  const ValueId a = b.node("Add", {h.x, b.scalar(three)});
  h.clip = b.node("Clip", {a, b.scalar(0), b.scalar(6)});
  const ValueId m = b.node("Mul", {h.clip, h.x});
  switch (form) {
    case HardSwishForm::kDivSix: h.out = b.node("Div", {m, b.scalar(6)}); break;
    case HardSwishForm::kMulSixthAfter: h.out = b.node("Mul", {m, b.scalar(1.0f / 6)}); break;
    case HardSwishForm::kMulSixthBefore: h.out = b.node("Mul", {b.scalar(1.0f / 6), m}); break;
  }
  b.output(h.out);
  return h;
}

TEST(FuseSubgraphs, HardSwishInEachSpellingBecomesOneNode) {
  for (const auto form : {HardSwishForm::kDivSix, HardSwishForm::kMulSixthAfter, HardSwishForm::kMulSixthBefore}) {
    HardSwishGraph h = hard_swish_graph(form);
    ASSERT_TRUE(run_fuse_subgraphs(h.b.g, {}));
    expect_single_node(h.b.g, "HardSwish", {h.x}, h.out);
    EXPECT_TRUE(h.b.g.nodes()[0].attrs.empty());
  }
}

TEST(FuseSubgraphs, XTimesHardSigmoidOfASixthIsHardSwish) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 8});
  const ValueId hs = b.node("HardSigmoid", {x}, {{"alpha", 1.0 / 6}, {"beta", 0.5}});
  const ValueId out = b.node("Mul", {x, hs});
  b.output(out);
  ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
  expect_single_node(b.g, "HardSwish", {x}, out);
}

TEST(FuseSubgraphs, HardSwishLookalikesStay) {
  {  // x + 2, not x + 3
    HardSwishGraph h = hard_swish_graph(HardSwishForm::kDivSix, 2.0f);
    const std::string before = snapshot(h.b.g);
    ASSERT_TRUE(run_fuse_subgraphs(h.b.g, {}));
    EXPECT_EQ(snapshot(h.b.g), before);
  }
  {  // the clipped value is read elsewhere too
    HardSwishGraph h = hard_swish_graph(HardSwishForm::kDivSix);
    h.b.output(h.clip);
    const std::string before = snapshot(h.b.g);
    ASSERT_TRUE(run_fuse_subgraphs(h.b.g, {}));
    EXPECT_EQ(snapshot(h.b.g), before);
  }
  {  // HardSigmoid with ONNX's default alpha 0.2 is not the sixth HardSwish needs
    TensorGraphBuilder b;
    const ValueId x = b.input("x", {2, 8});
    b.output(b.node("Mul", {x, b.node("HardSigmoid", {x})}));
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before);
  }
}

// ---- Gelu ----

enum class GeluEnd { kXTimesAThenHalf, kHalfXThenTimesA, kXTimesHalfA };

// a = 1 + f(x) (f already built), then 0.5 * x * a in the spelling `end`; returns the output.
ValueId gelu_end(TensorGraphBuilder& b, ValueId x, ValueId f, GeluEnd end) {
  const ValueId a = b.node("Add", {f, b.scalar(1)});
  switch (end) {
    case GeluEnd::kXTimesAThenHalf: return b.node("Mul", {b.node("Mul", {x, a}), b.scalar(0.5f)});
    case GeluEnd::kHalfXThenTimesA: return b.node("Mul", {b.node("Mul", {x, b.scalar(0.5f)}), a});
    case GeluEnd::kXTimesHalfA: return b.node("Mul", {x, b.node("Mul", {a, b.scalar(0.5f)})});
  }
  return ir::kNoValue;
}

TEST(FuseSubgraphs, ErfGeluInEachSpellingBecomesGelu) {
  for (const auto end : {GeluEnd::kXTimesAThenHalf, GeluEnd::kHalfXThenTimesA, GeluEnd::kXTimesHalfA}) {
    for (const bool divide : {true, false}) {
      TensorGraphBuilder b;
      const ValueId x = b.input("x", {2, 8});
      const ValueId d = divide ? b.node("Div", {x, b.scalar(std::sqrt(2.0f))})
                               : b.node("Mul", {x, b.scalar(std::sqrt(0.5f))});
      const ValueId out = gelu_end(b, x, b.node("Erf", {d}), end);
      b.output(out);
      ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
      expect_single_node(b.g, "Gelu", {x}, out);
      EXPECT_EQ(b.g.nodes()[0].attr_str("approximate"), "none");
    }
  }
}

TEST(FuseSubgraphs, TanhGeluBecomesGeluWithTheTanhApproximation) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 8});
  // (x + Pow(x, 3) * 0.044715) * sqrt(2 / pi)
  const ValueId cubic = b.node("Mul", {b.node("Pow", {x, b.scalar(3)}), b.scalar(0.044715f)});
  const ValueId u = b.node("Mul", {b.node("Add", {x, cubic}), b.scalar(static_cast<float>(std::sqrt(2.0 / M_PI)))});
  const ValueId out = gelu_end(b, x, b.node("Tanh", {u}), GeluEnd::kXTimesAThenHalf);
  b.output(out);
  ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
  expect_single_node(b.g, "Gelu", {x}, out);
  EXPECT_EQ(b.g.nodes()[0].attr_str("approximate"), "tanh");
}

TEST(FuseSubgraphs, GeluLookalikesStay) {
  {  // Erf(x / 2) is not Gelu's erf(x / sqrt 2)
    TensorGraphBuilder b;
    const ValueId x = b.input("x", {2, 8});
    b.output(gelu_end(b, x, b.node("Erf", {b.node("Div", {x, b.scalar(2)})}), GeluEnd::kXTimesAThenHalf));
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before);
  }
  {  // erf(x / sqrt 2) is also a graph output
    TensorGraphBuilder b;
    const ValueId x = b.input("x", {2, 8});
    const ValueId e = b.node("Erf", {b.node("Div", {x, b.scalar(std::sqrt(2.0f))})});
    b.output(gelu_end(b, x, e, GeluEnd::kXTimesAThenHalf));
    b.output(e);
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before);
  }
}

// ---- LayerNormalization ----

struct LayerNormGraph {
  TensorGraphBuilder b;
  ValueId x, gamma, beta = ir::kNoValue, centred, out;
};

// x [2, 4]: d = x - ReduceMean(x), y = d / Sqrt(ReduceMean(d^2) + 1e-5) * gamma [+ beta].
LayerNormGraph layer_norm_graph(bool square_with_pow, bool with_beta, int64_t axis = -1) {
  LayerNormGraph l;
  TensorGraphBuilder& b = l.b;
  l.x = b.input("x", {2, 4});
  const ValueId mean = b.node("ReduceMean", {l.x, b.axes({axis})});
  l.centred = b.node("Sub", {l.x, mean});
  const ValueId sq = square_with_pow ? b.node("Pow", {l.centred, b.scalar(2)}) : b.node("Mul", {l.centred, l.centred});
  const ValueId var = b.node("ReduceMean", {sq, b.axes({axis})});
  const ValueId den = b.node("Sqrt", {b.node("Add", {var, b.scalar(1e-5f)})});
  const ValueId normed = b.node("Div", {l.centred, den});
  l.gamma = b.constant({4}, {1, 2, 3, 4});
  l.out = b.node("Mul", {normed, l.gamma});
  if (with_beta) {
    l.beta = b.constant({4}, {0.5f, 0.5f, 0.5f, 0.5f});
    l.out = b.node("Add", {l.out, l.beta});
  }
  b.output(l.out);
  return l;
}

TEST(FuseSubgraphs, LayerNormSubgraphBecomesLayerNormalization) {
  for (const bool pow : {true, false}) {
    for (const bool with_beta : {true, false}) {
      LayerNormGraph l = layer_norm_graph(pow, with_beta);
      ASSERT_TRUE(run_fuse_subgraphs(l.b.g, {}));
      std::vector<ValueId> inputs = {l.x, l.gamma};
      if (with_beta) inputs.push_back(l.beta);
      expect_single_node(l.b.g, "LayerNormalization", inputs, l.out);
      const ir::Node& n = l.b.g.nodes()[0];
      EXPECT_EQ(n.attr_int("axis", 0), -1);
      EXPECT_DOUBLE_EQ(n.attr_float("epsilon"), static_cast<double>(1e-5f));
      EXPECT_EQ(n.attr_int("stash_type", 0), 1);
    }
  }
}

TEST(FuseSubgraphs, LayerNormOverTheLastAxisByNumberAlsoFuses) {
  LayerNormGraph l = layer_norm_graph(true, false, 1);
  // Axis 1 is the last only where the rank is known: give the squares their shape, as ONNX's
  // shape inference would.
  for (const ir::Node& n : l.b.g.nodes()) {
    if (n.op != "Pow") continue;
    l.b.g.value(n.outputs[0]).shape = {2, 4};
    l.b.g.value(n.outputs[0]).shape_known = true;
  }
  ASSERT_TRUE(run_fuse_subgraphs(l.b.g, {}));
  EXPECT_EQ(count_op(l.b.g, "LayerNormalization"), 1u);
}

TEST(FuseSubgraphs, LayerNormLookalikesStay) {
  {  // normalised over the first axis
    LayerNormGraph l = layer_norm_graph(true, true, 0);
    const std::string before = snapshot(l.b.g);
    ASSERT_TRUE(run_fuse_subgraphs(l.b.g, {}));
    EXPECT_EQ(snapshot(l.b.g), before);
  }
  {  // the centred value has a third reader
    LayerNormGraph l = layer_norm_graph(true, true);
    l.b.output(l.b.node("Neg", {l.centred}));
    const std::string before = snapshot(l.b.g);
    ASSERT_TRUE(run_fuse_subgraphs(l.b.g, {}));
    EXPECT_EQ(snapshot(l.b.g), before);
  }
}

// The subgraph's intermediates must have no reader outside it (the top of fuse_subgraphs.cpp),
// and a graph output is such a reader: a centred value that is a graph output, or a standard
// deviation that another node reads, keeps the subgraph as it is.
TEST(FuseSubgraphs, LayerNormLeavesIntermediatesReadOutsideIt) {
  {  // the centred value is also a graph output
    LayerNormGraph l = layer_norm_graph(true, true);
    l.b.output(l.centred);
    const std::string before = snapshot(l.b.g);
    ASSERT_TRUE(run_fuse_subgraphs(l.b.g, {}));
    EXPECT_EQ(snapshot(l.b.g), before);
    EXPECT_TRUE(ir::verify(l.b.g)) << ir::verify(l.b.g).message();
  }
  {  // the standard deviation has another reader
    LayerNormGraph l = layer_norm_graph(true, true);
    ValueId sd = ir::kNoValue;
    for (const ir::Node& n : l.b.g.nodes()) {
      if (n.op == "Sqrt") sd = n.outputs[0];
    }
    l.b.output(l.b.node("Neg", {sd}));
    const std::string before = snapshot(l.b.g);
    ASSERT_TRUE(run_fuse_subgraphs(l.b.g, {}));
    EXPECT_EQ(snapshot(l.b.g), before);
    EXPECT_TRUE(ir::verify(l.b.g)) << ir::verify(l.b.g).message();
  }
}

// ---- kiln.AddLayerNorm ----

TEST(FuseSubgraphs, AResidualAddBeforeALayerNormalizationJoinsIt) {
  TensorGraphBuilder b;
  const ValueId a = b.input("a", {2, 4});
  const ValueId r = b.input("residual", {2, 4});
  const ValueId gamma = b.constant({4}, {1, 1, 1, 1});
  const ValueId beta = b.constant({4}, {0, 0, 0, 0});
  const ValueId out = b.node("LayerNormalization", {b.node("Add", {a, r}), gamma, beta}, {{"epsilon", 1e-6}});
  b.output(out);
  std::vector<std::string> notes;
  PassContext ctx;
  ctx.log = [&](const std::string& m) { notes.push_back(m); };
  ASSERT_TRUE(run_fuse_subgraphs(b.g, ctx));
  expect_single_node(b.g, "kiln.AddLayerNorm", {a, r, gamma, beta}, out);
  EXPECT_DOUBLE_EQ(b.g.nodes()[0].attr_float("epsilon"), 1e-6) << "the norm's attributes stay";
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("1 Add + LayerNormalization"), std::string::npos) << notes[0];
}

TEST(FuseSubgraphs, ALayerNormMadeInTheSamePassAlsoTakesItsAdd) {
  LayerNormGraph l = layer_norm_graph(true, true);
  // Make x the sum of two inputs: x = Add(a, b), read by the subgraph's ReduceMean and Sub.
  TensorGraphBuilder& b = l.b;
  const ValueId a = b.input("a", {2, 4});
  const ValueId r = b.input("residual", {2, 4});
  ir::Node add;
  add.op = "Add";
  add.name = "residual_add";
  add.inputs = {a, r};
  add.outputs = {l.x};
  b.g.inputs().erase(b.g.inputs().begin());  // x is no longer a graph input
  b.g.nodes().insert(b.g.nodes().begin(), add);
  ASSERT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
  expect_single_node(b.g, "kiln.AddLayerNorm", {a, r, l.gamma, l.beta}, l.out);
}

TEST(FuseSubgraphs, AnAddOfAWeightOrWithAnotherReaderStaysApart) {
  for (const bool weight_operand : {true, false}) {
    TensorGraphBuilder b;
    const ValueId a = b.input("a", {2, 4});
    const ValueId other = weight_operand ? b.constant({4}, {1, 2, 3, 4}) : b.input("residual", {2, 4});
    const ValueId sum = b.node("Add", {a, other});
    b.output(b.node("LayerNormalization", {sum, b.constant({4}, {1, 1, 1, 1})}));
    if (!weight_operand) b.output(sum);  // the residual stream goes on
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_subgraphs(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before) << (weight_operand ? "a bias add" : "a sum read twice");
  }
}

}  // namespace
}  // namespace kiln::passes
