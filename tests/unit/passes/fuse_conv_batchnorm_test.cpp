// passes/fuse_conv_batchnorm.cpp on the graph alone: a BatchNormalization right after a Conv folds
// into the Conv's weight and bias (the CPU kernels' agreement is tests/unit/backends_cpu's).
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

// Conv (2 output channels, 1 input channel, 1x2 kernel) -> BatchNormalization with
// s = scale / sqrt(var + eps) = (2 / sqrt(3 + 1), 3 / sqrt(15 + 1)) = (1, 0.75) and
// t = bias - mean * s = (0.5 - 1 * 1, -1 - 2 * 0.75) = (-0.5, -2.5).
struct ConvBnGraph {
  TensorGraphBuilder b;
  ValueId x, w, bias, conv_out, bn_out;
  std::vector<ValueId> bn_params;
};

ConvBnGraph conv_bn_graph(bool with_bias) {
  ConvBnGraph c;
  TensorGraphBuilder& b = c.b;
  c.x = b.input("x", {1, 1, 3, 4});
  c.w = b.constant({2, 1, 1, 2}, {1, 2, 3, 4});
  std::vector<ValueId> in = {c.x, c.w};
  if (with_bias) {
    c.bias = b.constant({2}, {10, 20});
    in.push_back(c.bias);
  }
  c.conv_out = b.node("Conv", in);
  // scale, bias, mean, var
  c.bn_params = {b.constant({2}, {2, 3}), b.constant({2}, {0.5f, -1}), b.constant({2}, {1, 2}),
                 b.constant({2}, {3, 15})};
  c.bn_out = b.node("BatchNormalization", {c.conv_out, c.bn_params[0], c.bn_params[1], c.bn_params[2], c.bn_params[3]},
                    {{"epsilon", 1.0}});
  b.output(c.bn_out);
  return c;
}

TEST(FuseConvBatchnorm, FoldsTheNormalisationIntoWeightAndBias) {
  for (const bool with_bias : {true, false}) {
    ConvBnGraph c = conv_bn_graph(with_bias);
    std::vector<std::string> notes;
    PassContext ctx;
    ctx.log = [&](const std::string& m) { notes.push_back(m); };
    ASSERT_TRUE(run_fuse_conv_batchnorm(c.b.g, ctx));
    const Graph& g = c.b.g;
    EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
    ASSERT_EQ(g.nodes().size(), 1u);
    const ir::Node& conv = g.nodes()[0];
    EXPECT_EQ(conv.op, "Conv");
    EXPECT_EQ(conv.outputs, std::vector<ValueId>{c.bn_out}) << "the Conv writes the normalised value";
    ASSERT_EQ(conv.inputs.size(), 3u);
    EXPECT_EQ(conv.inputs[0], c.x);
    // W'[m] = W[m] * s[m]; B'[m] = (B[m] - mean[m]) * s[m] + bias[m], B = 0 without a bias.
    EXPECT_NE(conv.inputs[1], c.w) << "a new weight: the old one may have other readers";
    EXPECT_EQ(load_f32(g, conv.inputs[1]), (std::vector<float>{1, 2, 2.25f, 3}));
    EXPECT_EQ(g.weight(conv.inputs[1]).shape, (std::vector<int64_t>{2, 1, 1, 2}));
    const std::vector<float> want_bias = with_bias ? std::vector<float>{9.5f, 12.5f} : std::vector<float>{-0.5f, -2.5f};
    EXPECT_EQ(load_f32(g, conv.inputs[2]), want_bias);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("folded 1 BatchNormalization"), std::string::npos) << notes[0];
  }
}

TEST(FuseConvBatchnorm, LeavesAConvOutputWithAnotherReader) {
  ConvBnGraph c = conv_bn_graph(true);
  c.b.output(c.conv_out);  // the un-normalised value is wanted too
  const std::string before = snapshot(c.b.g);
  ASSERT_TRUE(run_fuse_conv_batchnorm(c.b.g, {}));
  EXPECT_EQ(snapshot(c.b.g), before);
}

TEST(FuseConvBatchnorm, LeavesParametersThatAreNotConstantsOfOneValuePerChannel) {
  {  // the running mean comes in at run time
    ConvBnGraph c = conv_bn_graph(true);
    const ValueId mean = c.b.input("mean", {2});
    c.b.g.nodes()[1].inputs[3] = mean;
    const std::string before = snapshot(c.b.g);
    ASSERT_TRUE(run_fuse_conv_batchnorm(c.b.g, {}));
    EXPECT_EQ(snapshot(c.b.g), before);
  }
  {  // three variances for two channels
    ConvBnGraph c = conv_bn_graph(true);
    c.b.g.nodes()[1].inputs[4] = c.b.constant({3}, {1, 1, 1});
    const std::string before = snapshot(c.b.g);
    ASSERT_TRUE(run_fuse_conv_batchnorm(c.b.g, {}));
    EXPECT_EQ(snapshot(c.b.g), before);
  }
}

TEST(FuseConvBatchnorm, LeavesANormalisationAfterAnythingButAConv) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {1, 2, 3, 4});
  const ValueId r = b.node("Relu", {x});
  const ValueId ones = b.constant({2}, {1, 1}), zeros = b.constant({2}, {0, 0});
  b.output(b.node("BatchNormalization", {r, ones, zeros, zeros, ones}));
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_fuse_conv_batchnorm(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
}

}  // namespace
}  // namespace kiln::passes
