// The f32 fast paths of the general-graph kernels (conv_gemm.h behind Conv and ConvTranspose,
// the depthwise kernel, fused epilogues, the Resize gather, row Softmax, BatchNormalization),
// each against a plain double-precision reference computed here or against the kernel's own
// f64 path, over odd sizes, on every ISA this CPU has.
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

ir::Tensor random_tensor(const ir::Shape& shape, uint32_t seed, ir::DType dtype = ir::DType::kF32) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  ir::Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) ir::tensor_set_f64(t, i, dist(rng));
  return t;
}

ir::Tensor as_f64(const ir::Tensor& t) {
  ir::Tensor d(ir::DType::kF64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) ir::tensor_set_f64(d, i, ir::tensor_get_f64(t, i));
  return d;
}

struct ConvCase {
  ir::Shape x, w;
  std::vector<int64_t> strides, pads, dilations;
  int64_t group;
};

// Conv in double, from the definition: y[b, m, o] = bias[m] + sum over the group's channels and
// kernel positions inside the (padded) input.
ir::Tensor conv_reference(const ir::Tensor& x, const ir::Tensor& w, const ir::Tensor& bias, const ConvCase& c,
                          const ir::Epilogue& ep) {
  const size_t d = c.x.size() - 2;
  const int64_t N = c.x[0], C = c.x[1], M = c.w[0], cg = C / c.group, mg = M / c.group;
  ir::Shape out = {N, M};
  for (size_t i = 0; i < d; ++i) {
    const int64_t ext = (c.w[i + 2] - 1) * c.dilations[i] + 1;
    out.push_back((c.x[i + 2] + c.pads[i] + c.pads[i + d] - ext) / c.strides[i] + 1);
  }
  ir::Tensor y(ir::DType::kF32, out);
  const int64_t out_sp = y.numel() / (N * M);
  std::vector<int64_t> o(d), k(d);
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t oi = 0; oi < out_sp; ++oi) {
        int64_t rest = oi;
        for (size_t i = d; i-- > 0;) o[i] = rest % out[i + 2], rest /= out[i + 2];
        double s = ir::tensor_get_f64(bias, m);
        const int64_t k_sp = w.numel() / (M * cg);
        for (int64_t ch = 0; ch < cg; ++ch) {
          for (int64_t ki = 0; ki < k_sp; ++ki) {
            int64_t kr = ki, off = 0, stride = 1;
            bool inside = true;
            for (size_t i = d; i-- > 0;) {
              k[i] = kr % c.w[i + 2], kr /= c.w[i + 2];
              const int64_t p = o[i] * c.strides[i] - c.pads[i] + k[i] * c.dilations[i];
              inside = inside && p >= 0 && p < c.x[i + 2];
              off += p * stride;
              stride *= c.x[i + 2];
            }
            if (!inside) continue;
            const int64_t in_sp = stride;
            s += ir::tensor_get_f64(x, (b * C + (m / mg) * cg + ch) * in_sp + off) *
                 ir::tensor_get_f64(w, (m * cg + ch) * k_sp + ki);
          }
        }
        ir::tensor_set_f64(y, (b * M + m) * out_sp + oi, ir::apply_epilogue(ep, s));
      }
    }
  }
  return y;
}

ir::Node conv_node(const ConvCase& c, const ir::Epilogue& ep) {
  ir::Node n;
  n.op = "Conv";
  n.name = "conv";
  n.outputs.resize(1);
  n.attrs = {{"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}, {"group", c.group},
             {"kernel_shape", ir::Shape(c.w.begin() + 2, c.w.end())}};
  ir::set_node_epilogue(n, ep);
  return n;
}

std::vector<ir::Epilogue> epilogues() {
  std::vector<ir::Epilogue> out(6);
  out[1].activation = ir::Activation::kRelu;
  out[2].activation = ir::Activation::kHardSwish;
  out[2].scale = 0.75;
  out[2].shift = -0.25;
  out[3].activation = ir::Activation::kSwish;
  out[3].alpha = 1.5;
  out[4].activation = ir::Activation::kClip;
  out[4].alpha = -0.2;
  out[4].beta = 0.3;
  out[5].activation = ir::Activation::kGelu;  // a vector erf on AVX2 and up
  out[5].scale = 1.25;
  return out;
}

TEST(ConvKernels, MatchTheDefinitionOverShapesEpiloguesAndIsas) {
  const std::vector<ConvCase> cases = {
      {{3, 16, 9, 13}, {7, 16, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},        // 1x1: the image is the patch matrix
      {{2, 3, 11, 10}, {5, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1},         // 3x3, stride 2
      {{2, 6, 12, 17}, {10, 3, 3, 3}, {1, 1}, {2, 0, 1, 2}, {2, 2}, 2},         // groups, dilation, uneven pads
      {{1, 5, 8, 70}, {4, 5, 1, 3}, {1, 3}, {0, 1, 0, 1}, {1, 1}, 1},          // wide rows, stride 3 across
      {{1, 8, 7, 9}, {8, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 8},           // depthwise
      {{2, 6, 9, 8}, {6, 1, 5, 5}, {2, 1}, {2, 2, 2, 2}, {1, 1}, 6},           // depthwise 5x5, stride 2 down
      {{1, 3, 10, 45}, {3, 1, 3, 3}, {1, 1}, {2, 1, 0, 3}, {2, 2}, 3},         // depthwise, dilated, uneven pads
      {{1, 4, 7, 20}, {4, 1, 3, 3}, {1, 2}, {1, 1, 1, 1}, {1, 1}, 4},          // depthwise, stride 2 across
      {{2, 5, 2, 48}, {5, 1, 5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 5},          // depthwise, plane shorter than the kernel
      {{1, 3, 3, 20}, {3, 1, 5, 5}, {2, 1}, {2, 2, 2, 2}, {1, 1}, 3},          // the same, stride 2 down, one short run
      {{1, 2, 4, 37}, {2, 1, 3, 3}, {1, 1}, {4, 1, 0, 1}, {1, 1}, 2},          // depthwise, rows over padding alone
      {{2, 4, 131}, {6, 4, 3}, {2}, {1, 1}, {1}, 1},                           // 1-D: the tap table
      {{2, 2, 4, 5, 6}, {3, 2, 2, 3, 2}, {1, 2, 1}, {0, 1, 1, 1, 0, 0}, {1, 1, 2}, 1},  // 3-D
      {{1, 8, 5, 6}, {42, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},          // one tile: channels split among threads
  };
  for (Isa isa : isas()) {
    ASSERT_TRUE(isa_override(isa).is_ok());
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const ConvCase& c = cases[ci];
      const ir::Tensor x = random_tensor(c.x, 10 + ci), w = random_tensor(c.w, 20 + ci);
      const ir::Tensor bias = random_tensor({c.w[0]}, 30 + ci);
      for (const ir::Epilogue& ep : epilogues()) {
        SCOPED_TRACE("isa " + std::string(isa_name(isa)) + ", case " + std::to_string(ci) + ", activation " +
                     ir::activation_name(ep.activation));
        const ir::Tensor got = run(conv_node(c, ep), {&x, &w, &bias});
        EXPECT_LE(worst(got, conv_reference(x, w, bias, c, ep)), 2e-6);
      }
    }
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
}

TEST(ConvKernels, ConvTransposeMatchesItsDoublePath) {
  struct Case {
    ir::Shape x, w;
    std::vector<int64_t> strides, pads;
    int64_t group;
  };
  const std::vector<Case> cases = {
      {{1, 6, 7, 9}, {6, 4, 2, 2}, {2, 2}, {0, 0, 0, 0}, 1},   // the segmentation heads' 2x upsampling
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {2, 1}, {1, 0, 1, 1}, 2},   // overlapping taps, groups, padding
      {{1, 3, 70}, {3, 5, 4}, {3}, {1, 2}, 1},                 // 1-D
  };
  for (Isa isa : isas()) {
    ASSERT_TRUE(isa_override(isa).is_ok());
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      ir::Node n;
      n.op = "ConvTranspose";
      n.name = "deconv";
      n.outputs.resize(1);
      n.attrs = {{"strides", c.strides}, {"pads", c.pads}, {"group", c.group},
                 {"kernel_shape", ir::Shape(c.w.begin() + 2, c.w.end())}};
      for (const ir::Epilogue& ep : epilogues()) {
        SCOPED_TRACE("isa " + std::string(isa_name(isa)) + ", case " + std::to_string(ci));
        ir::set_node_epilogue(n, ep);
        const ir::Tensor x = random_tensor(c.x, 40 + ci), w = random_tensor(c.w, 50 + ci);
        const ir::Tensor bias = random_tensor({c.w[1] * c.group}, 60 + ci);
        const ir::Tensor x64 = as_f64(x), w64 = as_f64(w), b64 = as_f64(bias);
        EXPECT_LE(worst(run(n, {&x, &w, &bias}), run(n, {&x64, &w64, &b64})), 2e-6);
      }
    }
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
}

TEST(ConvKernels, MatMulBiasAndEpilogueMatchTheSeparateNodes) {
  const ir::Tensor a = random_tensor({3, 5, 13}, 1), b = random_tensor({13, 70}, 2), bias = random_tensor({70}, 3);
  ir::Node mm;
  mm.op = "MatMul";
  mm.name = "mm";
  mm.outputs.resize(1);
  const ir::Tensor plain = run(mm, {&a, &b});
  for (const ir::Epilogue& ep : epilogues()) {
    ir::Node fused = mm;
    ir::set_node_epilogue(fused, ep);
    const ir::Tensor got = run(fused, {&a, &b, &bias});
    ir::Tensor want(ir::DType::kF32, plain.shape());
    for (int64_t i = 0; i < plain.numel(); ++i) {
      ir::tensor_set_f64(want, i, ir::apply_epilogue(ep, ir::tensor_get_f64(plain, i) + bias.data<float>()[i % 70]));
    }
    EXPECT_LE(worst(got, want), 1e-6) << ir::activation_name(ep.activation);
  }
  // The same product with the weight stored as rows ([N, K]), as the build stores constant ones.
  ir::Tensor bt(ir::DType::kF32, {70, 13});
  for (int64_t k = 0; k < 13; ++k) {
    for (int64_t n = 0; n < 70; ++n) bt.mutable_data<float>()[n * 13 + k] = b.data<float>()[k * 70 + n];
  }
  ir::Node rows = mm;
  rows.attrs["kiln.b_transposed"] = int64_t{1};
  EXPECT_EQ(worst(run(rows, {&a, &bt}), plain), 0.0);
  // 80 rows (several row tiles, threads sharing them), against b as [K, N], with bias and every
  // epilogue.
  const ir::Tensor many = random_tensor({2, 40, 13}, 4);
  for (const ir::Epilogue& ep : epilogues()) {
    ir::Node fused = rows, ref = mm;
    ir::set_node_epilogue(fused, ep);
    ir::set_node_epilogue(ref, ep);
    EXPECT_LE(worst(run(fused, {&many, &bt, &bias}), run(ref, {&many, &b, &bias})), 2e-6) << ir::activation_name(ep.activation);
  }
}

TEST(ConvKernels, ResizeGatherSoftmaxAndBatchNormMatchTheirDoublePaths) {
  // Nearest resize at whole and fractional ratios (a gather), and linear (not one).
  const ir::Tensor x = random_tensor({2, 3, 5, 7}, 7), x64 = as_f64(x);
  for (const auto& [mode, scales] : std::vector<std::pair<std::string, std::vector<float>>>{
           {"nearest", {1, 1, 2, 2}}, {"nearest", {1, 1, 1.5f, 0.75f}}, {"linear", {1, 1, 2, 3}}}) {
    ir::Node n;
    n.op = "Resize";
    n.name = "resize";
    n.outputs.resize(1);
    n.attrs = {{"mode", mode}, {"coordinate_transformation_mode", std::string("asymmetric")},
               {"nearest_mode", std::string("floor")}};
    ir::Tensor s(ir::DType::kF32, {4});
    std::copy(scales.begin(), scales.end(), s.mutable_data<float>());
    const ir::Tensor got = run(n, {&x, nullptr, &s}), want = run(n, {&x64, nullptr, &s});
    EXPECT_LE(worst(got, want), 1e-7) << mode;
  }
  // Softmax over the last axis: rows shorter and longer than a vector, large and -inf inputs.
  ir::Tensor logits = random_tensor({5, 37}, 8);
  for (int64_t i = 0; i < 37; ++i) logits.mutable_data<float>()[i] *= 200.0f;
  logits.mutable_data<float>()[40] = -std::numeric_limits<float>::infinity();
  ir::Node sm;
  sm.op = "Softmax";
  sm.name = "softmax";
  sm.outputs.resize(1);
  const ir::Tensor l64 = as_f64(logits);
  EXPECT_LE(worst(run(sm, {&logits}), run(sm, {&l64})), 1e-6);
  // BatchNormalization on f32 against f64.
  const ir::Tensor bx = random_tensor({2, 4, 3, 5}, 9);
  const ir::Tensor scale = random_tensor({4}, 10), shift = random_tensor({4}, 11), mean = random_tensor({4}, 12);
  ir::Tensor var = random_tensor({4}, 13);
  for (int64_t i = 0; i < 4; ++i) var.mutable_data<float>()[i] = std::fabs(var.data<float>()[i]) + 0.1f;
  ir::Node bn;
  bn.op = "BatchNormalization";
  bn.name = "bn";
  bn.outputs.resize(1);
  const ir::Tensor bx64 = as_f64(bx);
  EXPECT_LE(worst(run(bn, {&bx, &scale, &shift, &mean, &var}), run(bn, {&bx64, &scale, &shift, &mean, &var})), 1e-6);
}

// The f32 2-D MaxPool (outputs whose window columns lie inside the input taken a tap at a time
// across the row) gives the general loop's values bit for bit (that loop runs when the indices
// are wanted too), with strides, dilations and padding on either side, and a NaN where one lies;
// the f32 GlobalAveragePool agrees with the f64 path.
TEST(ConvKernels, PoolFastPathsMatchTheGeneralLoop) {
  struct Case {
    ir::Shape x;
    std::vector<int64_t> kernel, strides, pads, dilations;
  };
  const Case cases[] = {{{1, 3, 2, 96}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}},
                        {{2, 2, 9, 13}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
                        {{1, 2, 7, 11}, {2, 3}, {1, 3}, {0, 2, 1, 0}, {2, 2}},
                        {{1, 1, 5, 4}, {3, 5}, {1, 1}, {0, 2, 0, 2}, {1, 1}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(ir::shape_to_string(c.x));
    ir::Tensor x = random_tensor(c.x, 21);
    x.mutable_data<float>()[5] = std::nanf("");
    ir::Node pool;
    pool.op = "MaxPool";
    pool.name = "pool";
    pool.attrs = {{"kernel_shape", c.kernel}, {"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}};
    pool.outputs.resize(1);
    const ir::Tensor fast = run(pool, {&x});
    pool.outputs.resize(2);
    std::vector<ir::Tensor> general;
    ASSERT_TRUE(tensor_run_node(pool, {&x}, general).is_ok());
    ASSERT_EQ(fast.shape(), general[0].shape());
    for (int64_t i = 0; i < fast.numel(); ++i) {
      const float a = fast.data<float>()[i], b = general[0].data<float>()[i];
      EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << i << ": " << a << " against " << b;
    }
  }
  const ir::Tensor x = random_tensor({2, 5, 3, 97}, 22);
  ir::Node gap;
  gap.op = "GlobalAveragePool";
  gap.name = "gap";
  gap.outputs.resize(1);
  const ir::Tensor x64 = as_f64(x);
  EXPECT_LE(worst(run(gap, {&x}), run(gap, {&x64})), 1e-7);
}

// MaxUnpool puts MaxPool's maxima back where MaxPool found them (zero elsewhere), at the start of
// a larger output_shape, and refuses an index outside the unpooled shape or a smaller shape.
TEST(ConvKernels, MaxUnpoolUndoesMaxPoolsSelection) {
  const ir::Tensor x = random_tensor({2, 3, 6, 4}, 14);
  ir::Node pool;
  pool.op = "MaxPool";
  pool.name = "pool";
  pool.outputs.resize(2);
  pool.attrs = {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}};
  std::vector<ir::Tensor> pooled;
  ASSERT_TRUE(tensor_run_node(pool, {&x}, pooled).is_ok());
  ASSERT_EQ(pooled.size(), 2u);
  ir::Node unpool;
  unpool.op = "MaxUnpool";
  unpool.name = "unpool";
  unpool.outputs.resize(1);
  unpool.attrs = pool.attrs;
  const ir::Tensor y = run(unpool, {&pooled[0], &pooled[1]});
  ASSERT_EQ(y.shape(), x.shape());
  std::vector<bool> chosen(static_cast<size_t>(x.numel()), false);
  for (int64_t i = 0; i < pooled[1].numel(); ++i) chosen[static_cast<size_t>(pooled[1].data<int64_t>()[i])] = true;
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(y.data<float>()[i], chosen[static_cast<size_t>(i)] ? x.data<float>()[i] : 0.0f) << i;
  }
  // A larger output_shape: the same elements at the same coordinates.
  ir::Tensor shape(ir::DType::kI64, {4});
  const int64_t dims[] = {2, 3, 7, 5};
  std::copy(std::begin(dims), std::end(dims), shape.mutable_data<int64_t>());
  const ir::Tensor big = run(unpool, {&pooled[0], &pooled[1], &shape});
  ASSERT_EQ(big.shape(), (ir::Shape{2, 3, 7, 5}));
  for (int64_t nc = 0; nc < 6; ++nc) {
    for (int64_t h = 0; h < 7; ++h) {
      for (int64_t w = 0; w < 5; ++w) {
        const float want = h < 6 && w < 4 ? y.data<float>()[(nc * 6 + h) * 4 + w] : 0.0f;
        EXPECT_EQ(big.data<float>()[(nc * 7 + h) * 5 + w], want) << nc << " " << h << " " << w;
      }
    }
  }
  std::vector<ir::Tensor> out;
  shape.mutable_data<int64_t>()[2] = 5;
  const Status small = tensor_run_node(unpool, {&pooled[0], &pooled[1], &shape}, out);
  EXPECT_NE(small.message().find("smaller than the unpooled"), std::string::npos) << small.message();
  ir::Tensor bad(ir::DType::kI64, pooled[1].shape());
  bad.mutable_data<int64_t>()[3] = x.numel();
  const Status outside = tensor_run_node(unpool, {&pooled[0], &bad}, out);
  EXPECT_NE(outside.message().find("outside the unpooled"), std::string::npos) << outside.message();
}

}  // namespace
// RoiAlign: over a linear image the average of a bin's bilinear samples is the image at the bin's
// centre; mode max with one sample a bin halfway between four pixels keeps a quarter of their
// largest; a region reads the image its batch index names, and an index outside x's batch is an
// error.
TEST(ConvKernels, RoiAlignAveragesAndMaximaOfBilinearSamples) {
  const int64_t H = 6, W = 8;
  ir::Tensor x(ir::DType::kF32, {2, 2, H, W});
  auto f = [](int64_t img, double row, double col) { return 0.5 * row - 0.25 * col + 3.0 * static_cast<double>(img); };
  for (int64_t img = 0; img < 4; ++img) {
    for (int64_t y = 0; y < H; ++y) {
      for (int64_t c = 0; c < W; ++c) {
        x.mutable_data<float>()[(img * H + y) * W + c] =
            static_cast<float>(f(img, static_cast<double>(y), static_cast<double>(c)));
      }
    }
  }
  // Two regions in the interior, in coordinates twice the image's (spatial_scale 0.5).
  ir::Tensor rois(ir::DType::kF32, {2, 4});
  const float boxes[] = {2, 2, 10, 8, 4, 3, 12, 10};
  std::copy(std::begin(boxes), std::end(boxes), rois.mutable_data<float>());
  ir::Tensor batch(ir::DType::kI64, {2});
  batch.mutable_data<int64_t>()[0] = 1;
  batch.mutable_data<int64_t>()[1] = 0;
  ir::Node n;
  n.op = "RoiAlign";
  n.name = "roi";
  n.outputs.resize(1);
  n.attrs = {{"output_height", int64_t{3}}, {"output_width", int64_t{2}}, {"sampling_ratio", int64_t{0}},
             {"spatial_scale", 0.5}, {"mode", std::string("avg")},
             {"coordinate_transformation_mode", std::string("half_pixel")}};
  const ir::Tensor y = run(n, {&x, &rois, &batch});
  ASSERT_EQ(y.shape(), (ir::Shape{2, 2, 3, 2}));
  for (int64_t r = 0; r < 2; ++r) {
    const float* b = boxes + r * 4;
    const double y0 = b[1] * 0.5 - 0.5, x0 = b[0] * 0.5 - 0.5;
    const double bh = (b[3] - b[1]) * 0.5 / 3, bw = (b[2] - b[0]) * 0.5 / 2;
    for (int64_t c = 0; c < 2; ++c) {
      const int64_t img = batch.data<int64_t>()[r] * 2 + c;
      for (int64_t ph = 0; ph < 3; ++ph) {
        for (int64_t pw = 0; pw < 2; ++pw) {
          const double want = f(img, y0 + (static_cast<double>(ph) + 0.5) * bh, x0 + (static_cast<double>(pw) + 0.5) * bw);
          EXPECT_NEAR(y.data<float>()[((r * 2 + c) * 3 + ph) * 2 + pw], want, 1e-5) << r << " " << c << " " << ph;
        }
      }
    }
  }
  // Mode max, output_half_pixel, one sample a bin at (ph + 0.5, pw + 0.5).
  const ir::Tensor z = random_tensor({1, 1, 5, 5}, 31);
  ir::Tensor one(ir::DType::kF32, {1, 4});
  const float whole[] = {0, 0, 4, 4};
  std::copy(std::begin(whole), std::end(whole), one.mutable_data<float>());
  ir::Tensor zero(ir::DType::kI64, {1});
  n.attrs = {{"output_height", int64_t{4}}, {"output_width", int64_t{4}}, {"sampling_ratio", int64_t{1}},
             {"spatial_scale", 1.0}, {"mode", std::string("max")},
             {"coordinate_transformation_mode", std::string("output_half_pixel")}};
  const ir::Tensor m = run(n, {&z, &one, &zero});
  ASSERT_EQ(m.shape(), (ir::Shape{1, 1, 4, 4}));
  for (int64_t ph = 0; ph < 4; ++ph) {
    for (int64_t pw = 0; pw < 4; ++pw) {
      const float* p = z.data<float>();
      const float top = std::max({p[ph * 5 + pw], p[ph * 5 + pw + 1], p[(ph + 1) * 5 + pw], p[(ph + 1) * 5 + pw + 1]});
      EXPECT_NEAR(m.data<float>()[ph * 4 + pw], 0.25f * top, 1e-6) << ph << " " << pw;
    }
  }
  // A reversed region (x2 < x1, y2 < y1) under half_pixel takes no samples: every bin is 0.
  const float reversed[] = {4.5f, 4.5f, 0, 0};  // bins of -1.125 pixels a side
  std::copy(std::begin(reversed), std::end(reversed), one.mutable_data<float>());
  n.attrs["mode"] = std::string("avg");
  n.attrs["sampling_ratio"] = int64_t{0};
  n.attrs["coordinate_transformation_mode"] = std::string("half_pixel");
  const ir::Tensor none = run(n, {&z, &one, &zero});
  for (int64_t i = 0; i < none.numel(); ++i) EXPECT_EQ(none.data<float>()[i], 0.0f) << i;
  zero.mutable_data<int64_t>()[0] = 1;
  std::vector<ir::Tensor> out;
  const Status st = tensor_run_node(n, {&z, &one, &zero}, out);
  EXPECT_NE(st.message().find("outside x's batch"), std::string::npos) << st.message();
  // A region far larger than the image with an adaptive grid would list billions of samples, and a
  // corner that is not a number has no grid at all: both are errors naming the region.
  zero.mutable_data<int64_t>()[0] = 0;
  const float huge[] = {0, 0, 1e7f, 1e7f};
  std::copy(std::begin(huge), std::end(huge), one.mutable_data<float>());
  out.clear();
  const Status big = tensor_run_node(n, {&z, &one, &zero}, out);
  EXPECT_NE(big.message().find("region 0 needs 2500000 x 2500000 samples in each of its 16 bins"), std::string::npos)
      << big.message();
  one.mutable_data<float>()[2] = std::nanf("");
  const Status nan = tensor_run_node(n, {&z, &one, &zero}, out);
  EXPECT_NE(nan.message().find("region 0 has a corner that is not a finite number"), std::string::npos)
      << nan.message();
  // Within the bound, the same region with a fixed ratio runs: samples outside the image read 0.
  one.mutable_data<float>()[2] = 1e7f;
  n.attrs["sampling_ratio"] = int64_t{2};
  const ir::Tensor far = run(n, {&z, &one, &zero});
  ASSERT_EQ(far.shape(), (ir::Shape{1, 1, 4, 4}));
  for (int64_t i = 0; i < far.numel(); ++i) EXPECT_EQ(far.data<float>()[i], 0.0f) << i;
}

}  // namespace kiln::cpu
