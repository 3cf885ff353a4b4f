// passes/fuse_epilogues.cpp: the pointwise work after a Conv, ConvTranspose, Gemm or MatMul moves
// into it: per-channel affines into a convolution's weights, a bias Add into a MatMul, then one
// activation, then scalar scale and shift (ir/epilogue.h).
#include <gtest/gtest.h>

#include <limits>

#include "ir/epilogue.h"
#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT
using ir::Activation;

// The one product node left, after checking that it writes `output` and the graph verifies.
const ir::Node& fused_product(const Graph& g, ValueId output) {
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  EXPECT_EQ(g.nodes().size(), 1u) << ir::print_graph(g);
  EXPECT_EQ(g.nodes()[0].outputs, std::vector<ValueId>{output});
  return g.nodes()[0];
}

TEST(FuseEpilogues, ConvTakesChannelAffinesIntoItsWeightsThenActivationScaleAndShift) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {1, 1, 3, 3});
  const ValueId w = b.constant({2, 1, 1, 1}, {1, 2});
  const ValueId y = b.node("Conv", {x, w, b.constant({2}, {10, 20})});
  // Per output channel: * (3, 4) as [2, 1, 1], + (0.5, -0.5) as [1, 2, 1, 1]; then Relu, * 2, + 1.
  const ValueId m = b.node("Mul", {y, b.constant({2, 1, 1}, {3, 4})});
  const ValueId a = b.node("Add", {b.constant({1, 2, 1, 1}, {0.5f, -0.5f}), m});
  const ValueId out = b.node("Add", {b.node("Mul", {b.node("Relu", {a}), b.scalar(2)}), b.scalar(1)});
  b.output(out);
  std::vector<std::string> notes;
  PassContext ctx;
  ctx.log = [&](const std::string& n) { notes.push_back(n); };
  ASSERT_TRUE(run_fuse_epilogues(b.g, ctx));
  const ir::Node& conv = fused_product(b.g, out);
  EXPECT_EQ(conv.op, "Conv");
  ASSERT_EQ(conv.inputs.size(), 3u);
  EXPECT_EQ(conv.inputs[0], x);
  // W' = W * s = (3, 8); B' = B * s + t = (30.5, 79.5).
  EXPECT_EQ(load_f32(b.g, conv.inputs[1]), (std::vector<float>{3, 8}));
  EXPECT_EQ(load_f32(b.g, conv.inputs[2]), (std::vector<float>{30.5f, 79.5f}));
  const ir::Epilogue e = ir::node_epilogue(conv);
  EXPECT_EQ(e.activation, Activation::kRelu);
  EXPECT_EQ(e.scale, 2.0);
  EXPECT_EQ(e.shift, 1.0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("5 nodes moved into 1"), std::string::npos) << notes[0];
}

TEST(FuseEpilogues, ConvTransposeScalesTheWeightsOfEachOutputChannel) {
  // ConvTranspose weights are [C, M / group, k...]: element [c, m] feeds output channel
  // (c / (C / group)) * (M / group) + m.
  struct Case {
    int64_t group;
    std::vector<int64_t> shape;
    std::vector<float> w, scales, want;
  };
  const Case cases[] = {
      {1, {2, 3, 1, 1}, {1, 2, 3, 4, 5, 6}, {1, 10, 100}, {1, 20, 300, 4, 50, 600}},  // channel = m
      {2, {4, 1, 1, 1}, {1, 2, 3, 4}, {10, 100}, {10, 20, 300, 400}},                 // channel = c / 2
  };
  for (const Case& c : cases) {
    TensorGraphBuilder b;
    const ValueId x = b.input("x", {1, c.shape[0], 2, 2});
    const ValueId y = b.node("ConvTranspose", {x, b.constant(c.shape, c.w)}, {{"group", c.group}});
    const ValueId out = b.node("Mul", {y, b.constant({static_cast<int64_t>(c.scales.size()), 1, 1}, c.scales)});
    b.output(out);
    ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
    const ir::Node& conv = fused_product(b.g, out);
    EXPECT_EQ(conv.inputs.size(), 2u) << "a scale alone adds no bias";
    std::vector<float> w = load_f32(b.g, conv.inputs[1]);
    EXPECT_EQ(w, c.want) << "group " << c.group;
    EXPECT_TRUE(ir::node_epilogue(conv).empty());
  }
}

TEST(FuseEpilogues, MatMulTakesABiasThenAnActivation) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {5, 3});
  const ValueId w = b.constant({3, 2}, {1, 2, 3, 4, 5, 6});
  const ValueId bias = b.constant({2}, {0.25f, -0.25f});
  const ValueId out = b.node("Sigmoid", {b.node("Add", {b.node("MatMul", {x, w}), bias})});
  b.output(out);
  ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
  const ir::Node& mm = fused_product(b.g, out);
  EXPECT_EQ(mm.op, "MatMul");
  EXPECT_EQ(mm.inputs, (std::vector<ValueId>{x, w, bias}));
  EXPECT_EQ(ir::node_epilogue(mm).activation, Activation::kSigmoid);
}

TEST(FuseEpilogues, ABiasOfTheWrongLengthStaysAnAdd) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {5, 3});
  const ValueId y = b.node("MatMul", {x, b.constant({3, 2}, {1, 2, 3, 4, 5, 6})});
  b.output(b.node("Add", {y, b.constant({3}, {1, 2, 3})}));  // [3] does not match N = 2
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
}

TEST(FuseEpilogues, ActivationsTakeTheirParameters) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  struct Case {
    std::string op;
    std::map<std::string, ir::Attr> attrs;
    std::vector<float> clip_bounds;  // Clip: min, max inputs (NaN: absent)
    Activation want;
    double alpha, beta;
  };
  const Case cases[] = {
      {"LeakyRelu", {}, {}, Activation::kLeakyRelu, 0.01, 0.0},
      {"LeakyRelu", {{"alpha", 0.3}}, {}, Activation::kLeakyRelu, 0.3, 0.0},
      {"HardSigmoid", {}, {}, Activation::kHardSigmoid, 0.2, 0.5},
      {"Gelu", {}, {}, Activation::kGelu, 0.0, 0.0},
      {"Gelu", {{"approximate", std::string("tanh")}}, {}, Activation::kGeluTanh, 0.0, 0.0},
      {"Clip", {}, {0.0f, 6.0f}, Activation::kClip, 0.0, 6.0},
      {"Clip", {}, {-1.0f}, Activation::kClip, -1.0, kInf},
      {"Clip", {}, {}, Activation::kClip, -kInf, kInf},
  };
  for (const Case& c : cases) {
    TensorGraphBuilder b;
    const ValueId y = b.node("MatMul", {b.input("x", {5, 3}), b.constant({3, 2}, {1, 2, 3, 4, 5, 6})});
    std::vector<ValueId> in = {y};
    for (float v : c.clip_bounds) in.push_back(b.scalar(v));
    const ValueId out = b.node(c.op, in, c.attrs);
    b.output(out);
    ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
    const ir::Epilogue e = ir::node_epilogue(fused_product(b.g, out));
    EXPECT_EQ(e.activation, c.want) << c.op;
    EXPECT_EQ(e.alpha, c.alpha) << c.op;
    EXPECT_EQ(e.beta, c.beta) << c.op;
  }
}

TEST(FuseEpilogues, SwishIsTheProductTimesItsSigmoid) {
  for (const bool scaled : {false, true}) {
    TensorGraphBuilder b;
    const ValueId y = b.node("MatMul", {b.input("x", {5, 3}), b.constant({3, 2}, {1, 2, 3, 4, 5, 6})});
    // y * Sigmoid(y), or y * Sigmoid(y * 1.5)
    const ValueId gate = scaled ? b.node("Sigmoid", {b.node("Mul", {y, b.scalar(1.5f)})}) : b.node("Sigmoid", {y});
    const ValueId out = b.node("Mul", {gate, y});
    b.output(out);
    ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
    const ir::Epilogue e = ir::node_epilogue(fused_product(b.g, out));
    EXPECT_EQ(e.activation, Activation::kSwish);
    EXPECT_EQ(e.alpha, scaled ? 1.5 : 1.0);
  }
}

TEST(FuseEpilogues, SwishLeavesAProductWithAThirdReader) {
  TensorGraphBuilder b;
  const ValueId y = b.node("MatMul", {b.input("x", {5, 3}), b.constant({3, 2}, {1, 2, 3, 4, 5, 6})});
  b.output(b.node("Mul", {b.node("Sigmoid", {y}), y}));
  b.output(b.node("Neg", {y}));
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
}

// A product that is also a graph output keeps its producer: the MatMul must not take the Mul's
// output, or the graph output would never be produced (ir::verify would fail).
TEST(FuseEpilogues, SwishLeavesAProductThatIsAGraphOutput) {
  TensorGraphBuilder b;
  const ValueId y = b.node("MatMul", {b.input("x", {5, 3}), b.constant({3, 2}, {1, 2, 3, 4, 5, 6})});
  b.output(b.node("Mul", {b.node("Sigmoid", {y}), y}));
  b.output(y);
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
}

TEST(FuseEpilogues, ScalarArithmeticComposesIntoScaleAndShift) {
  // ((y / 4) - 1) * 3: scale 0.75, shift -3.
  TensorGraphBuilder b;
  const ValueId y = b.node("Gemm", {b.input("x", {5, 3}), b.constant({3, 2}, {1, 2, 3, 4, 5, 6})});
  const ValueId out = b.node("Mul", {b.scalar(3), b.node("Sub", {b.node("Div", {y, b.scalar(4)}), b.scalar(1)})});
  b.output(out);
  ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
  const ir::Node& gemm = fused_product(b.g, out);
  EXPECT_EQ(gemm.op, "Gemm");
  const ir::Epilogue e = ir::node_epilogue(gemm);
  EXPECT_EQ(e.activation, Activation::kNone);
  EXPECT_EQ(e.scale, 0.75);
  EXPECT_EQ(e.shift, -3.0);
}

// A MatMul y = x [5, 3] * W [3, 2] with a constant weight.
ValueId epilogue_test_matmul(TensorGraphBuilder& b) {
  return b.node("MatMul", {b.input("x", {5, 3}), b.constant({3, 2}, {1, 2, 3, 4, 5, 6})});
}

TEST(FuseEpilogues, StopsAtASecondActivation) {
  TensorGraphBuilder b;
  const ValueId y = epilogue_test_matmul(b);
  const ValueId r = b.node("Relu", {y});
  b.output(b.node("Tanh", {r}));
  ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  ASSERT_EQ(b.g.nodes().size(), 2u) << ir::print_graph(b.g);
  EXPECT_EQ(b.g.nodes()[0].op, "MatMul");
  EXPECT_EQ(b.g.nodes()[0].outputs, std::vector<ValueId>{r});
  EXPECT_EQ(ir::node_epilogue(b.g.nodes()[0]).activation, Activation::kRelu);
  EXPECT_EQ(b.g.nodes()[1].op, "Tanh");
  EXPECT_EQ(b.g.nodes()[1].inputs, std::vector<ValueId>{r});
}

TEST(FuseEpilogues, LeavesArithmeticThatIsNotAScaleOrShiftOfTheProduct) {
  for (const char* form : {"y / 0", "1 - y", "y * vector"}) {
    TensorGraphBuilder b;
    const ValueId y = epilogue_test_matmul(b);
    const std::string f = form;
    if (f == "y / 0") b.output(b.node("Div", {y, b.scalar(0)}));
    if (f == "1 - y") b.output(b.node("Sub", {b.scalar(1), y}));
    if (f == "y * vector") b.output(b.node("Mul", {y, b.constant({2}, {2, 3})}));
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before) << form;
  }
}

TEST(FuseEpilogues, LeavesValuesWithAnotherReaderBroadcastConstantsAndIntegerProducts) {
  {  // the product is also a graph output
    TensorGraphBuilder b;
    const ValueId y = b.node("Conv", {b.input("x", {1, 1, 3, 3}), b.constant({2, 1, 1, 1}, {1, 2})});
    b.output(b.node("Relu", {y}));
    b.output(y);
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before);
  }
  {  // [2] against a Conv output [N, 2, H, W] broadcasts on the last axis, not the channels
    TensorGraphBuilder b;
    const ValueId y = b.node("Conv", {b.input("x", {1, 1, 3, 3}), b.constant({2, 1, 1, 1}, {1, 2})});
    b.output(b.node("Mul", {y, b.constant({2}, {3, 4})}));
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before);
  }
  {  // an integer product has no float epilogue
    TensorGraphBuilder b;
    const ValueId x = b.input("x", {5, 3}, DType::kI32);
    const ValueId y = b.node("MatMul", {x, x}, {}, DType::kI32);
    b.output(b.node("Relu", {y}, {}, DType::kI32));
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_fuse_epilogues(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before);
  }
}

}  // namespace
}  // namespace kiln::passes
