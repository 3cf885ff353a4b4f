// passes/fold_channel_affine.h: y * s + t per output channel folded into a Conv's or
// ConvTranspose's weight and bias, and BatchNormalization as such an affine.
#include <gtest/gtest.h>

#include <cmath>

#include "passes/fold_channel_affine.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(FoldChannelAffine, OutputChannelsOfConvAndConvTranspose) {
  ir::Node conv;
  conv.op = "Conv";
  conv.attrs["group"] = int64_t{3};
  EXPECT_EQ(conv_output_channels(conv, {12, 2, 3, 3}), 12);  // [M, C/g, k...]
  ir::Node deconv;
  deconv.op = "ConvTranspose";
  deconv.attrs["group"] = int64_t{3};
  EXPECT_EQ(conv_output_channels(deconv, {6, 4, 3, 3}), 12);  // [C, M/g, k...]
  deconv.attrs.erase("group");
  EXPECT_EQ(conv_output_channels(deconv, {6, 4, 3, 3}), 4);
}

// Conv(x, W [2, 1, 1, 2] = 1..4 [, B = (10, 20)]).
struct AffineConv {
  TensorGraphBuilder b;
  ValueId w, bias = ir::kNoValue;
};

AffineConv affine_conv(bool with_bias) {
  AffineConv c;
  const ValueId x = c.b.input("x", {1, 1, 3, 4});
  c.w = c.b.constant({2, 1, 1, 2}, {1, 2, 3, 4});
  std::vector<ValueId> in = {x, c.w};
  if (with_bias) {
    c.bias = c.b.constant({2}, {10, 20});
    in.push_back(c.bias);
  }
  c.b.output(c.b.g.add_node1("Conv", "conv", in));
  return c;
}

TEST(FoldChannelAffine, AShiftAloneAddsToTheBiasAndKeepsTheWeight) {
  for (const bool with_bias : {true, false}) {
    AffineConv c = affine_conv(with_bias);
    ir::Node& conv = c.b.g.nodes()[0];
    ASSERT_TRUE(fold_channel_affine(c.b.g, conv, "shift", {}, {1.5, -2}));
    ASSERT_EQ(conv.inputs.size(), 3u);
    EXPECT_EQ(conv.inputs[1], c.w);
    EXPECT_EQ(c.b.g.value(conv.inputs[2]).name, "conv.folded_shift.bias");
    const std::vector<float> want = with_bias ? std::vector<float>{11.5f, 18} : std::vector<float>{1.5f, -2};
    EXPECT_EQ(load_f32(c.b.g, conv.inputs[2]), want);
  }
}

TEST(FoldChannelAffine, AScaleAloneScalesWeightAndBiasAndAddsNoBias) {
  for (const bool with_bias : {true, false}) {
    AffineConv c = affine_conv(with_bias);
    ir::Node& conv = c.b.g.nodes()[0];
    ASSERT_TRUE(fold_channel_affine(c.b.g, conv, "scale", {2, -1}, {}));
    EXPECT_EQ(c.b.g.value(conv.inputs[1]).name, "conv.scaled_scale.weight");
    EXPECT_EQ(load_f32(c.b.g, conv.inputs[1]), (std::vector<float>{2, 4, -3, -4}));
    EXPECT_EQ(load_f32(c.b.g, c.w), (std::vector<float>{1, 2, 3, 4})) << "the old weight is untouched";
    if (with_bias) {
      ASSERT_EQ(conv.inputs.size(), 3u);
      EXPECT_EQ(load_f32(c.b.g, conv.inputs[2]), (std::vector<float>{20, -20}));
    } else {
      EXPECT_EQ(conv.inputs.size(), 2u);
    }
  }
}

TEST(FoldChannelAffine, RefusesWeightsAndBiasesItCannotFold) {
  {  // a bias of three values for two channels
    AffineConv c = affine_conv(false);
    ir::Node& conv = c.b.g.nodes()[0];
    conv.inputs.push_back(c.b.constant({3}, {1, 2, 3}));
    const std::vector<ValueId> before = conv.inputs;
    EXPECT_FALSE(fold_channel_affine(c.b.g, conv, "s", {2, 2}, {1, 1}));
    EXPECT_EQ(conv.inputs, before);
  }
  {  // a weight that comes in at run time
    AffineConv c = affine_conv(true);
    ir::Node& conv = c.b.g.nodes()[0];
    conv.inputs[1] = c.b.input("w_runtime", {2, 1, 1, 2});
    const std::vector<ValueId> before = conv.inputs;
    EXPECT_FALSE(fold_channel_affine(c.b.g, conv, "s", {2, 2}, {1, 1}));
    EXPECT_EQ(conv.inputs, before);
  }
  {  // a bias that comes in at run time
    AffineConv c = affine_conv(true);
    ir::Node& conv = c.b.g.nodes()[0];
    conv.inputs[2] = c.b.input("b_runtime", {2});
    const std::vector<ValueId> before = conv.inputs;
    EXPECT_FALSE(fold_channel_affine(c.b.g, conv, "s", {2, 2}, {1, 1}));
    EXPECT_EQ(conv.inputs, before);
  }
}

TEST(FoldChannelAffine, BatchNormalizationIsScaleOverDeviationAndShiftedMean) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {1, 2, 2, 2});
  // s = scale / sqrt(var + eps), t = bias - mean * s; eps 0.5: var + eps = 4 and 1.
  const ValueId scale = b.constant({2}, {3, 1}), shift = b.constant({2}, {1, 0});
  const ValueId mean = b.constant({2}, {2, -4}), var = b.constant({2}, {3.5f, 0.5f});
  b.output(b.g.add_node1("BatchNormalization", "bn", {x, scale, shift, mean, var}, {{"epsilon", 0.5}}));
  const auto a = batchnorm_affine(b.g, b.g.nodes()[0], 2);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->s, (std::vector<double>{1.5, 1}));
  EXPECT_EQ(a->t, (std::vector<double>{1 - 2 * 1.5, 0 + 4 * 1}));
  EXPECT_FALSE(batchnorm_affine(b.g, b.g.nodes()[0], 3)) << "two values for three channels";
  b.g.nodes()[0].inputs[3] = b.input("mean_runtime", {2});
  EXPECT_FALSE(batchnorm_affine(b.g, b.g.nodes()[0], 2));
}

}  // namespace
}  // namespace kiln::passes
