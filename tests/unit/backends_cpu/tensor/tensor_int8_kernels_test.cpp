// The int8 products of calibrated builds (kiln.QConv, kiln.QMatMul; backends/cpu/tensor/tensor_int8.cpp)
// against their definition: x quantised with the node's scale and zero point, the codes
// dequantised again, and the product of those with the dequantised weights computed in double
// (Conv's f64 path, checked against its own definition in tensor_conv_kernels_test.cpp; MatMul by
// hand). Over odd sizes (K not a multiple of 4, positions not a multiple of a tile, output
// channels not a multiple of 4), both zero points, saturating inputs, epilogues, every ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/tensor/tensor_kernel.h"
#include "ir/epilogue.h"
#include "unit/backends_cpu/tensor_test_util.h"

namespace kiln::cpu {
namespace {

using test_util::isas;
using test_util::run;
using test_util::worst;

ir::Tensor uniform(const ir::Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  ir::Tensor t(ir::DType::kF32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

// Random int8 codes in [-127, 127] and positive scales, one a row.
struct Weights {
  ir::Tensor codes, scales;
};

Weights random_weights(const ir::Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  Weights w{ir::Tensor(ir::DType::kI8, shape), ir::Tensor(ir::DType::kF32, {shape[0]})};
  for (int64_t i = 0; i < w.codes.numel(); ++i) w.codes.mutable_data<int8_t>()[i] = static_cast<int8_t>(code(rng));
  for (int64_t i = 0; i < shape[0]; ++i) w.scales.mutable_data<float>()[i] = scale(rng);
  return w;
}

// What the kernels compute x as: (clamp(round(x * (1 / scale)) + zp, 0, 255) - zp) * scale, in double.
ir::Tensor dequantized_input(const ir::Tensor& x, float scale, int zp) {
  ir::Tensor d(ir::DType::kF64, x.shape());
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double q = std::clamp<double>(std::nearbyint(x.data<float>()[i] * inv) + zp, 0.0, 255.0);
    d.mutable_data<double>()[i] = (q - zp) * static_cast<double>(scale);
  }
  return d;
}

ir::Tensor dequantized_weights(const Weights& w) {
  ir::Tensor d(ir::DType::kF64, w.codes.shape());
  const int64_t row = w.codes.numel() / w.codes.shape()[0];
  for (int64_t i = 0; i < w.codes.numel(); ++i) {
    d.mutable_data<double>()[i] = w.codes.data<int8_t>()[i] * static_cast<double>(w.scales.data<float>()[i / row]);
  }
  return d;
}

ir::Epilogue hard_swish() {
  ir::Epilogue e;
  e.activation = ir::Activation::kHardSwish;
  e.scale = 0.5;
  e.shift = 0.25;
  return e;
}

struct ConvCase {
  ir::Shape x, w;
  std::vector<int64_t> strides, pads, dilations;
  int64_t group;
};

TEST(Int8Kernels, QConvMatchesTheDequantisedConvolution) {
  const std::vector<ConvCase> cases = {
      {{1, 16, 9, 13}, {7, 16, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},    // 1x1: the image is the patch matrix
      {{2, 3, 11, 10}, {5, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1},     // K = 27, stride 2, padding
      {{1, 6, 12, 17}, {10, 3, 3, 3}, {1, 1}, {2, 0, 1, 2}, {2, 2}, 2},    // groups, dilation, uneven pads
      {{1, 5, 8, 70}, {9, 5, 1, 3}, {1, 3}, {0, 1, 0, 1}, {1, 1}, 1},      // 2 tiles of positions, K = 15
      {{1, 4, 131}, {6, 4, 3}, {2}, {1, 1}, {1}, 1},                       // 1-D: the tap table
      {{1, 2, 4, 5, 6}, {3, 2, 2, 3, 2}, {1, 2, 1}, {0, 1, 1, 1, 0, 0}, {1, 1, 2}, 1},  // 3-D
      {{1, 40, 20, 20}, {33, 40, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},  // K = 360, 7 tiles
  };
  for (Isa isa : isas()) {
    ASSERT_TRUE(isa_override(isa).is_ok());
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const ConvCase& c = cases[ci];
      for (int zp : {128, 0}) {
        // Signed inputs around zero point 128; inputs that are mostly positive for zero point 0,
        // whose negatives saturate to code 0. Both reach past the scale's range and saturate at
        // the top too.
        const ir::Tensor x = zp == 128 ? uniform(c.x, 10 + ci, -1.2f, 1.2f) : uniform(c.x, 10 + ci, -0.1f, 2.2f);
        const float scale = zp == 128 ? 1.0f / 127 : 2.0f / 255;
        const Weights w = random_weights(c.w, 20 + ci);
        const ir::Tensor bias = uniform({c.w[0]}, 30 + ci, -1.0f, 1.0f);
        for (const ir::Epilogue& ep : {ir::Epilogue(), hard_swish()}) {
          SCOPED_TRACE("isa " + std::string(isa_name(isa)) + ", case " + std::to_string(ci) + ", zero point " +
                       std::to_string(zp) + ", activation " + ir::activation_name(ep.activation));
          ir::Node conv;
          conv.op = "Conv";
          conv.name = "conv";
          conv.outputs.resize(1);
          conv.attrs = {{"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}, {"group", c.group},
                        {"kernel_shape", ir::Shape(c.w.begin() + 2, c.w.end())}};
          ir::set_node_epilogue(conv, ep);
          ir::Node q = conv;
          q.op = "kiln.QConv";
          q.attrs["kiln.x_scale"] = static_cast<double>(scale);
          q.attrs["kiln.x_zero_point"] = int64_t{zp};
          const ir::Tensor xd = dequantized_input(x, scale, zp), wd = dequantized_weights(w);
          ir::Tensor bd(ir::DType::kF64, bias.shape());
          for (int64_t i = 0; i < bias.numel(); ++i) bd.mutable_data<double>()[i] = bias.data<float>()[i];
          const ir::Tensor want = run(conv, {&xd, &wd, &bd});
          EXPECT_LE(worst(run(q, {&x, &w.codes, &w.scales, &bias}), want), 2e-5);
        }
      }
    }
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
}

TEST(Int8Kernels, QMatMulMatchesTheDequantisedProduct) {
  struct Case {
    ir::Shape x;
    int64_t n;
    bool bias;
  };
  const std::vector<Case> cases = {{{2, 37, 45}, 19, true}, {{3, 8}, 5, false}, {{130, 64}, 33, true}, {{1, 1, 7}, 4, true}};
  for (Isa isa : isas()) {
    ASSERT_TRUE(isa_override(isa).is_ok());
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      const int64_t K = c.x.back();
      const ir::Tensor x = uniform(c.x, 40 + ci, -1.3f, 1.3f);
      const Weights w = random_weights({c.n, K}, 50 + ci);
      const ir::Tensor bias = uniform({c.n}, 60 + ci, -1.0f, 1.0f);
      const float scale = 1.0f / 127;
      for (const ir::Epilogue& ep : {ir::Epilogue(), hard_swish()}) {
        SCOPED_TRACE("isa " + std::string(isa_name(isa)) + ", case " + std::to_string(ci));
        ir::Node q;
        q.op = "kiln.QMatMul";
        q.name = "mm";
        q.outputs.resize(1);
        q.attrs = {{"kiln.x_scale", static_cast<double>(scale)}, {"kiln.x_zero_point", int64_t{128}}};
        ir::set_node_epilogue(q, ep);
        const ir::Tensor xd = dequantized_input(x, scale, 128), wd = dequantized_weights(w);
        ir::Shape shape = c.x;
        shape.back() = c.n;
        ir::Tensor want(ir::DType::kF64, shape);
        const int64_t rows = x.numel() / K;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < c.n; ++j) {
            double s = c.bias ? bias.data<float>()[j] : 0.0;
            for (int64_t k = 0; k < K; ++k) s += xd.data<double>()[r * K + k] * wd.data<double>()[j * K + k];
            want.mutable_data<double>()[r * c.n + j] = ir::apply_epilogue(ep, s);
          }
        }
        std::vector<const ir::Tensor*> in = {&x, &w.codes, &w.scales};
        if (c.bias) in.push_back(&bias);
        EXPECT_LE(worst(run(q, in), want), 2e-5);
      }
    }
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
}

TEST(Int8Kernels, BadOperandsAreErrorsNamingTheNode) {
  ir::Node q;
  q.op = "kiln.QMatMul";
  q.name = "mm";
  q.outputs.resize(1);
  q.attrs = {{"kiln.x_scale", 0.01}, {"kiln.x_zero_point", int64_t{128}}};
  const ir::Tensor x = uniform({2, 8}, 1, -1.0f, 1.0f);
  const Weights w = random_weights({3, 8}, 2);
  const ir::Tensor short_scales(ir::DType::kF32, {2});
  std::vector<ir::Tensor> out;
  Status st = tensor_run_node(q, {&x, &w.codes, &short_scales}, out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("mm"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("w_scale"), std::string::npos) << st.message();
  q.attrs["kiln.x_scale"] = 0.0;
  st = tensor_run_node(q, {&x, &w.codes, &w.scales}, out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("kiln.x_scale"), std::string::npos) << st.message();
  const ir::Tensor wrong_k = uniform({2, 9}, 3, -1.0f, 1.0f);
  q.attrs["kiln.x_scale"] = 0.01;
  EXPECT_FALSE(tensor_run_node(q, {&wrong_k, &w.codes, &w.scales}, out).is_ok());
}

// ONNX's QLinearMatMul with a per-row a scale and zero point, a per-column b scale and zero
// point and an i8 result that saturates, against the definition computed here; a y_scale that is
// not a scalar is refused.
TEST(Int8Kernels, QLinearMatMulRequantisesThePerRowAndColumnProduct) {
  const int64_t m = 3, k = 5, n = 4;
  std::mt19937 rng(7);
  ir::Tensor a(ir::DType::kU8, {m, k}), b(ir::DType::kI8, {k, n});
  for (int64_t i = 0; i < a.numel(); ++i) a.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
  for (int64_t i = 0; i < b.numel(); ++i) {
    b.mutable_data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  }
  ir::Tensor a_scale(ir::DType::kF32, {m}), a_zp(ir::DType::kU8, {m}), b_scale(ir::DType::kF32, {n}),
      b_zp(ir::DType::kI8, {n}), y_scale(ir::DType::kF32, {}), y_zp(ir::DType::kI8, {});
  for (int64_t i = 0; i < m; ++i) {
    a_scale.mutable_data<float>()[i] = 0.01f * static_cast<float>(i + 1);
    a_zp.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(100 + 10 * i);
  }
  for (int64_t j = 0; j < n; ++j) {
    b_scale.mutable_data<float>()[j] = 0.02f + 0.005f * static_cast<float>(j);
    b_zp.mutable_data<int8_t>()[j] = static_cast<int8_t>(j - 2);
  }
  y_scale.mutable_data<float>()[0] = 0.05f;
  y_zp.mutable_data<int8_t>()[0] = 3;
  ir::Node q;
  q.op = "QLinearMatMul";
  q.name = "qmm";
  q.outputs.resize(1);
  const ir::Tensor y = run(q, {&a, &a_scale, &a_zp, &b, &b_scale, &b_zp, &y_scale, &y_zp});
  ASSERT_EQ(y.dtype(), ir::DType::kI8);
  ASSERT_EQ(y.shape(), (ir::Shape{m, n}));
  int saturated = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t c = 0;
      for (int64_t p = 0; p < k; ++p) {
        c += (a.data<uint8_t>()[i * k + p] - a_zp.data<uint8_t>()[i]) *
             (b.data<int8_t>()[p * n + j] - b_zp.data<int8_t>()[j]);
      }
      const float factor = a_scale.data<float>()[i] * b_scale.data<float>()[j] / y_scale.data<float>()[0];
      const double want = std::clamp(std::nearbyint(static_cast<double>(c) * factor) + 3.0, -128.0, 127.0);
      saturated += want == -128.0 || want == 127.0;
      EXPECT_EQ(y.data<int8_t>()[i * n + j], static_cast<int8_t>(want)) << i << " " << j;
    }
  }
  EXPECT_GT(saturated, 0);  // the case reaches the clamp
  const ir::Tensor two_scales(ir::DType::kF32, {2});
  std::vector<ir::Tensor> out;
  const Status st = tensor_run_node(q, {&a, &a_scale, &a_zp, &b, &b_scale, &b_zp, &two_scales, &y_zp}, out);
  EXPECT_NE(st.message().find("qmm"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("scalars"), std::string::npos) << st.message();
}

// QLinearConv with a per-channel w scale and a bias: the bias adds before the requantisation,
// and a bias of the wrong length is refused naming the node.
TEST(Int8Kernels, QLinearConvAddsItsBiasBeforeRequantising) {
  ir::Tensor x(ir::DType::kU8, {1, 1, 2, 2}), w(ir::DType::kI8, {2, 1, 1, 1});
  const uint8_t xv[] = {10, 20, 30, 40};
  std::copy(std::begin(xv), std::end(xv), x.mutable_data<uint8_t>());
  w.mutable_data<int8_t>()[0] = 2;
  w.mutable_data<int8_t>()[1] = -3;
  ir::Tensor x_scale(ir::DType::kF32, {}), x_zp(ir::DType::kU8, {}), w_scale(ir::DType::kF32, {2}),
      w_zp(ir::DType::kI8, {}), y_scale(ir::DType::kF32, {}), y_zp(ir::DType::kU8, {}), bias(ir::DType::kI32, {2});
  x_scale.mutable_data<float>()[0] = 0.5f;
  x_zp.mutable_data<uint8_t>()[0] = 10;
  w_scale.mutable_data<float>()[0] = 0.25f;
  w_scale.mutable_data<float>()[1] = 0.125f;
  y_scale.mutable_data<float>()[0] = 0.25f;
  y_zp.mutable_data<uint8_t>()[0] = 100;
  bias.mutable_data<int32_t>()[0] = 4;
  bias.mutable_data<int32_t>()[1] = -8;
  ir::Node q;
  q.op = "QLinearConv";
  q.name = "qconv";
  q.outputs.resize(1);
  q.attrs = {{"kernel_shape", std::vector<int64_t>{1, 1}}};
  const ir::Tensor y = run(q, {&x, &x_scale, &x_zp, &w, &w_scale, &w_zp, &y_scale, &y_zp, &bias});
  ASSERT_EQ(y.shape(), (ir::Shape{1, 2, 2, 2}));
  ASSERT_EQ(y.dtype(), ir::DType::kU8);
  for (int64_t m = 0; m < 2; ++m) {
    for (int64_t p = 0; p < 4; ++p) {
      const double acc = (xv[p] - 10) * w.data<int8_t>()[m] + bias.data<int32_t>()[m];
      const float factor = 0.5f * w_scale.data<float>()[m] / 0.25f;
      const double want = std::clamp(std::nearbyint(acc * factor) + 100.0, 0.0, 255.0);
      EXPECT_EQ(y.data<uint8_t>()[m * 4 + p], static_cast<uint8_t>(want)) << m << " " << p;
    }
  }
  const ir::Tensor short_bias(ir::DType::kI32, {1});
  std::vector<ir::Tensor> out;
  const Status st = tensor_run_node(q, {&x, &x_scale, &x_zp, &w, &w_scale, &w_zp, &y_scale, &y_zp, &short_bias}, out);
  EXPECT_NE(st.message().find("qconv"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("B has 1 entries"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln::cpu
