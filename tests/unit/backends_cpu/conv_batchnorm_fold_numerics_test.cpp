// The Conv + BatchNormalization fold (passes/fuse_conv_batchnorm.cpp), checked by running the CPU
// kernels on the graph before the pass (Conv then BatchNormalization) and after it (the folded
// Conv alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cpu/tensor/tensor_kernel.h"
#include "ir/ops.h"
#include "passes/pass.h"

namespace kiln::cpu {
namespace {

ir::Tensor random_tensor(const ir::Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  ir::Tensor t(ir::DType::kF32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

ir::WeightEntry weight_of(const ir::Tensor& t) {
  ir::WeightEntry w;
  w.shape = t.shape();
  w.load = [t]() -> Expected<std::vector<float>> { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
  return w;
}

ir::Tensor loaded(const ir::WeightEntry& w) {
  auto v = w.load();
  EXPECT_TRUE(v) << v.status().message();
  ir::Tensor t(ir::DType::kF32, w.shape);
  if (v) std::copy(v->begin(), v->end(), t.mutable_data<float>());
  return t;
}

struct ConvBn {
  ir::Graph graph;
  ir::Tensor x, w, b, scale, shift, mean, var;
};

// x [2, 3, 6, 5] -> Conv (4 output channels, 3x3, pads 1, stride 2; with or without bias) -> BN.
ConvBn make(bool with_bias, bool conv_output_read_twice) {
  ConvBn c;
  c.x = random_tensor({2, 3, 6, 5}, 1, -1.0f, 1.0f);
  c.w = random_tensor({4, 3, 3, 3}, 2, -0.5f, 0.5f);
  c.b = random_tensor({4}, 3, -0.5f, 0.5f);
  c.scale = random_tensor({4}, 4, 0.5f, 2.0f);
  c.shift = random_tensor({4}, 5, -1.0f, 1.0f);
  c.mean = random_tensor({4}, 6, -0.3f, 0.3f);
  c.var = random_tensor({4}, 7, 0.1f, 3.0f);
  ir::Graph& g = c.graph;
  const ir::ValueId x = g.add_value("x", ir::DType::kF32, {2, 3, 6, 5});
  g.inputs() = {x};
  std::vector<ir::ValueId> conv_in = {x, g.add_weight("w", weight_of(c.w))};
  if (with_bias) conv_in.push_back(g.add_weight("b", weight_of(c.b)));
  const ir::ValueId y = g.add_node1("Conv", "conv", conv_in,
                                    {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                     {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                     {"strides", std::vector<int64_t>{2, 2}}});
  const ir::ValueId z = g.add_node1("BatchNormalization", "bn",
                                    {y, g.add_weight("scale", weight_of(c.scale)), g.add_weight("shift", weight_of(c.shift)),
                                     g.add_weight("mean", weight_of(c.mean)), g.add_weight("var", weight_of(c.var))},
                                    {{"epsilon", 1e-3}});
  g.outputs() = {z};
  if (conv_output_read_twice) g.outputs().push_back(y);
  return c;
}

ir::Tensor run(const ir::Node& n, const std::vector<const ir::Tensor*>& in) {
  std::vector<ir::Tensor> out;
  const Status st = tensor_run_node(n, in, out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out.empty() ? ir::Tensor() : std::move(out[0]);
}

TEST(FuseConvBatchnorm, FoldedConvolutionEqualsConvThenBatchNorm) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "conv with bias" : "conv without bias");
    ConvBn c = make(with_bias, false);
    // Before: the two kernels in turn.
    const ir::Node conv = c.graph.nodes()[0], bn = c.graph.nodes()[1];
    std::vector<const ir::Tensor*> conv_in = {&c.x, &c.w};
    if (with_bias) conv_in.push_back(&c.b);
    const ir::Tensor y = run(conv, conv_in);
    const ir::Tensor want = run(bn, {&y, &c.scale, &c.shift, &c.mean, &c.var});

    ASSERT_TRUE(passes::run_fuse_conv_batchnorm(c.graph, {}));
    ASSERT_TRUE(ir::verify(c.graph).is_ok());
    ASSERT_EQ(c.graph.nodes().size(), 1u);
    const ir::Node& folded = c.graph.nodes()[0];
    EXPECT_EQ(folded.op, "Conv");
    ASSERT_EQ(folded.inputs.size(), 3u);
    EXPECT_EQ(folded.outputs[0], c.graph.outputs()[0]);
    const ir::Tensor w2 = loaded(c.graph.weight(folded.inputs[1])), b2 = loaded(c.graph.weight(folded.inputs[2]));
    const ir::Tensor got = run(folded, {&c.x, &w2, &b2});
    ASSERT_EQ(got.shape(), want.shape());
    double worst = 0.0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      worst = std::max(worst, std::fabs(double(got.data<float>()[i]) - want.data<float>()[i]) /
                                  (1.0 + std::fabs(double(want.data<float>()[i]))));
    }
    EXPECT_LE(worst, 2e-6);  // float rounding of the folded weights alone
  }
}

TEST(FuseConvBatchnorm, LeavesAConvolutionWhoseOutputIsReadElsewhere) {
  ConvBn c = make(true, true);
  ASSERT_TRUE(passes::run_fuse_conv_batchnorm(c.graph, {}));
  ASSERT_EQ(c.graph.nodes().size(), 2u);
  EXPECT_EQ(c.graph.nodes()[1].op, "BatchNormalization");
}

}  // namespace
}  // namespace kiln::cpu
