// CPU kernels of general tensor ops, against plain references computed here, over odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/tensor/tensor_graph_runner.h"
#include "backends/cpu/tensor/tensor_kernel.h"
#include "ir/ops.h"
#include "ir/tensor_ops.h"
#include "unit/backends_cpu/tensor_test_util.h"

namespace kiln::cpu {
namespace {

using test_util::random_f32;

ir::Node node(const std::string& op, size_t outputs = 1) {
  ir::Node n;
  n.op = op;
  n.name = "n";
  n.outputs.resize(outputs);
  return n;
}

TEST(TensorKernels, EveryTensorOpHasACpuKernel) {
  for (const auto& op : ir::tensor_op_names()) EXPECT_NE(tensor_kernel(op), nullptr) << op;
}

TEST(TensorKernels, BroadcastingAddMatchesReference) {
  const ir::Tensor a = random_f32({7, 1, 83}, 1), b = random_f32({5, 1}, 2);
  std::vector<ir::Tensor> out;
  ASSERT_TRUE(tensor_run_node(node("Add"), {&a, &b}, out).is_ok());
  ASSERT_EQ(out[0].shape(), (ir::Shape{7, 5, 83}));
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      for (int64_t k = 0; k < 83; ++k) {
        const float want = a.data<float>()[i * 83 + k] + b.data<float>()[j];
        ASSERT_FLOAT_EQ(out[0].data<float>()[(i * 5 + j) * 83 + k], want);
      }
    }
  }
}

// One side has the output's shape and the other broadcasts to it: per channel, per feature, a
// middle run, a scalar run inside, on either side, and large enough to run on several threads.
TEST(TensorKernels, OneSidedBroadcastsMatchElementwiseReference) {
  const std::vector<std::pair<ir::Shape, ir::Shape>> cases = {
      {{2, 5, 7, 11}, {1, 5, 1, 1}}, {{2, 5, 7, 11}, {5, 1, 1}}, {{3, 7, 83}, {83}},      {{2, 5, 7, 11}, {1, 5, 1, 11}},
      {{2, 5, 7, 11}, {2, 1, 7, 1}}, {{2, 5, 7, 11}, {7, 11}},   {{4, 64, 33, 65}, {64, 1, 1}}, {{4, 64, 33, 65}, {65}}};
  for (const char* op : {"Sub", "Div"}) {
    for (const auto& [full_shape, part_shape] : cases) {
      for (bool part_first : {false, true}) {
        const ir::Tensor full = random_f32(full_shape, 7), part = random_f32(part_shape, 8);
        std::vector<ir::Tensor> out;
        const ir::Tensor& a = part_first ? part : full;
        const ir::Tensor& b = part_first ? full : part;
        ASSERT_TRUE(tensor_run_node(node(op), {&a, &b}, out).is_ok());
        ASSERT_EQ(out[0].shape(), full_shape);
        // Each output element from its own index, NumPy's rule: a part dim of 1 reads index 0.
        const size_t r = full_shape.size();
        for (int64_t i = 0; i < full.numel(); ++i) {
          int64_t rest = i, off = 0, stride = 1;
          for (size_t d = r; d-- > 0;) {
            const int64_t idx = rest % full_shape[d];
            rest /= full_shape[d];
            const size_t pd = d + part_shape.size();
            if (pd >= r) {
              const int64_t dim = part_shape[pd - r];
              off += (dim == 1 ? 0 : idx) * stride;
              stride *= dim;
            }
          }
          const float f = full.data<float>()[i], q = part.data<float>()[off];
          const float want = std::string(op) == "Sub" ? (part_first ? q - f : f - q) : (part_first ? q / f : f / q);
          ASSERT_EQ(out[0].data<float>()[i], want) << op << " " << ir::shape_to_string(full_shape) << " with "
                                                   << ir::shape_to_string(part_shape) << " at " << i;
        }
      }
    }
  }
}

TEST(TensorKernels, MismatchedShapesAreAnErrorNamingTheNode) {
  const ir::Tensor a = random_f32({3, 4}, 1), b = random_f32({5}, 2);
  std::vector<ir::Tensor> out;
  Status st = tensor_run_node(node("Mul"), {&a, &b}, out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("node 'n' (Mul)"), std::string::npos);
}

TEST(TensorKernels, BatchedMatMulMatchesReference) {
  const ir::Tensor a = random_f32({2, 7, 83}, 3), b = random_f32({83, 13}, 4);
  std::vector<ir::Tensor> out;
  ASSERT_TRUE(tensor_run_node(node("MatMul"), {&a, &b}, out).is_ok());
  ASSERT_EQ(out[0].shape(), (ir::Shape{2, 7, 13}));
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t i = 0; i < 7; ++i) {
      for (int64_t j = 0; j < 13; ++j) {
        double want = 0;
        for (int64_t k = 0; k < 83; ++k) want += double(a.data<float>()[(p * 7 + i) * 83 + k]) * b.data<float>()[k * 13 + j];
        EXPECT_NEAR(out[0].data<float>()[(p * 7 + i) * 13 + j], want, 1e-4);
      }
    }
  }
}

// kiln.Attention against softmax(scale q kt + mask) v in double: several 32-column panels of keys
// and of v's columns with partial last ones, a mask broadcast over the heads, and the empty axes
// (no keys: zeros; no dimensions: v's mean), on every ISA this CPU has.
TEST(TensorKernels, AttentionMatchesReference) {
  auto check = [](int64_t S, int64_t D, int64_t T, int64_t Dv) {
    SCOPED_TRACE(std::to_string(S) + "x" + std::to_string(D) + " keys " + std::to_string(T) + " x " +
                 std::to_string(Dv));
    const ir::Tensor q = random_f32({2, 3, S, D}, 11), kt = random_f32({2, 3, D, T}, 12);
    const ir::Tensor v = random_f32({2, 3, T, Dv}, 13), mask = random_f32({2, 1, S, T}, 14);
    ir::Node n = node("kiln.Attention");
    n.attrs["scale"] = 0.3;
    std::vector<ir::Tensor> out;
    ASSERT_TRUE(tensor_run_node(n, {&q, &kt, &v, &mask}, out).is_ok());
    ASSERT_EQ(out[0].shape(), (ir::Shape{2, 3, S, Dv}));
    double worst = 0.0;
    for (int64_t p = 0; p < 6; ++p) {
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> w(static_cast<size_t>(T));
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            dot += double{q.data<float>()[(p * S + i) * D + d]} * kt.data<float>()[(p * D + d) * T + j];
          }
          w[static_cast<size_t>(j)] = 0.3 * dot + mask.data<float>()[(p / 3 * S + i) * T + j];
          mx = std::max(mx, w[static_cast<size_t>(j)]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t c = 0; c < Dv; ++c) {
          double want = 0.0;
          for (int64_t j = 0; j < T; ++j) {
            want += w[static_cast<size_t>(j)] / sum * v.data<float>()[(p * T + j) * Dv + c];
          }
          worst = std::max(worst, std::fabs(out[0].data<float>()[(p * S + i) * Dv + c] - want));
        }
      }
    }
    EXPECT_LE(worst, 1e-5);
  };
  for (Isa isa : test_util::isas()) {
    SCOPED_TRACE(std::string(isa_name(isa)));
    ASSERT_TRUE(isa_override(isa).is_ok());
    check(13, 7, 45, 37);
    check(13, 20, 45, 37);  // the keys in 16 x 16 blocks and element by element
    check(5, 64, 128, 64);
    check(4, 3, 0, 5);
    check(4, 0, 9, 33);
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
}

// {kiln.layout = "bshd"}: q [B, S, H, D], k [B, T, H, D], v [B, T, H, Dv] read where they lie and
// y written as [B, S, H, Dv] give the bits of the default layout over the transposed operands,
// transposed back; operands of different batch or head counts are an error naming the node.
TEST(TensorKernels, AttentionReadsAndWritesHeadsWhereTheyLie) {
  auto transpose = [](const ir::Tensor& x, std::array<int, 4> perm) {
    ir::Shape shape(4);
    for (int d = 0; d < 4; ++d) shape[d] = x.shape()[perm[d]];
    ir::Tensor y(ir::DType::kF32, shape);
    const std::vector<int64_t> xs = tensor_strides(x.shape());
    std::array<int64_t, 4> i{};
    for (int64_t at = 0; at < y.numel(); ++at) {
      int64_t rest = at, from = 0;
      for (int d = 3; d >= 0; --d) {
        i[d] = rest % shape[d];
        rest /= shape[d];
      }
      for (int d = 0; d < 4; ++d) from += i[d] * xs[perm[d]];
      y.mutable_data<float>()[at] = x.data<float>()[from];
    }
    return y;
  };
  auto check = [&](int64_t S, int64_t D, int64_t T, int64_t Dv) {
    SCOPED_TRACE(std::to_string(S) + "x" + std::to_string(D) + " keys " + std::to_string(T) + " x " +
                 std::to_string(Dv));
    const ir::Tensor qs = random_f32({2, S, 3, D}, 21), ks = random_f32({2, T, 3, D}, 22);
    const ir::Tensor vs = random_f32({2, T, 3, Dv}, 23), mask = random_f32({2, 1, 1, T}, 24);
    const ir::Tensor q = transpose(qs, {0, 2, 1, 3}), kt = transpose(ks, {0, 2, 3, 1}), v = transpose(vs, {0, 2, 1, 3});
    ir::Node n = node("kiln.Attention");
    n.attrs["scale"] = 0.3;
    std::vector<ir::Tensor> want, got;
    ASSERT_TRUE(tensor_run_node(n, {&q, &kt, &v, &mask}, want).is_ok());
    n.attrs["kiln.layout"] = std::string("bshd");
    ASSERT_TRUE(tensor_run_node(n, {&qs, &ks, &vs, &mask}, got).is_ok());
    const ir::Tensor back = transpose(want[0], {0, 2, 1, 3});
    ASSERT_EQ(got[0].shape(), back.shape());
    for (int64_t i = 0; i < back.numel(); ++i) ASSERT_EQ(got[0].data<float>()[i], back.data<float>()[i]) << i;
  };
  for (Isa isa : test_util::isas()) {
    SCOPED_TRACE(std::string(isa_name(isa)));
    ASSERT_TRUE(isa_override(isa).is_ok());
    check(13, 7, 45, 37);
    check(13, 20, 45, 37);  // the keys in 16 x 16 blocks and element by element
    check(5, 64, 128, 64);
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
  const ir::Tensor q = random_f32({2, 5, 3, 8}, 1), k = random_f32({2, 6, 4, 8}, 2), v = random_f32({2, 6, 3, 8}, 3);
  ir::Node n = node("kiln.Attention");
  n.attrs["kiln.layout"] = std::string("bshd");
  std::vector<ir::Tensor> out;
  const Status st = tensor_run_node(n, {&q, &k, &v}, out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(n.name), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[2, 6, 4, 8]"), std::string::npos) << st.message();
}

// LayerNormalization against a double reference on every ISA (rows of 768 as BERT's, of 45 with
// a tail, of 3); kiln.AddLayerNorm gives the bits of Add then LayerNormalization, also where b
// broadcasts (the Add is made first there) and without a bias.
TEST(TensorKernels, LayerNormAndAddLayerNormMatchTheirReferences) {
  for (Isa isa : test_util::isas()) {
    SCOPED_TRACE(std::string(isa_name(isa)));
    ASSERT_TRUE(isa_override(isa).is_ok());
    for (const int64_t len : {768, 45, 3}) {
      SCOPED_TRACE("rows of " + std::to_string(len));
      ir::Tensor x = random_f32({2, 5, len}, 31);
      for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] = 40.0f + 3.0f * x.data<float>()[i];
      const ir::Tensor r = random_f32({2, 5, len}, 32), r1 = random_f32({1, 5, len}, 33);
      const ir::Tensor scale = random_f32({len}, 34), bias = random_f32({len}, 35);
      ir::Node ln = node("LayerNormalization");
      ln.attrs["epsilon"] = 1e-12;
      std::vector<ir::Tensor> y;
      ASSERT_TRUE(tensor_run_node(ln, {&x, &scale, &bias}, y).is_ok());
      for (int64_t row = 0; row < 10; ++row) {
        const float* xr = x.data<float>() + row * len;
        double mean = 0.0, var = 0.0;
        for (int64_t j = 0; j < len; ++j) mean += xr[j];
        mean /= static_cast<double>(len);
        for (int64_t j = 0; j < len; ++j) var += (xr[j] - mean) * (xr[j] - mean);
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(len) + 1e-12);
        for (int64_t j = 0; j < len; ++j) {
          const double want = (xr[j] - mean) * inv * scale.data<float>()[j] + bias.data<float>()[j];
          ASSERT_NEAR(y[0].data<float>()[row * len + j], want, 2e-5 * (1.0 + std::fabs(want))) << row << ", " << j;
        }
      }
      for (const ir::Tensor* b : {&r, &r1}) {
        for (const bool with_bias : {true, false}) {
          std::vector<ir::Tensor> sum, want, got;
          ASSERT_TRUE(tensor_run_node(node("Add"), {&x, b}, sum).is_ok());
          ASSERT_TRUE(tensor_run_node(ln, {&sum[0], &scale, with_bias ? &bias : nullptr}, want).is_ok());
          ir::Node fused = node("kiln.AddLayerNorm");
          fused.attrs = ln.attrs;
          ASSERT_TRUE(tensor_run_node(fused, {&x, b, &scale, with_bias ? &bias : nullptr}, got).is_ok());
          ASSERT_EQ(got[0].shape(), want[0].shape());
          for (int64_t i = 0; i < want[0].numel(); ++i) {
            ASSERT_EQ(got[0].data<float>()[i], want[0].data<float>()[i]) << i;
          }
        }
      }
    }
  }
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
}

TEST(TensorKernels, ConvWithPaddingAndStrideMatchesReference) {
  const ir::Tensor x = random_f32({1, 2, 7, 5}, 5), w = random_f32({3, 2, 3, 3}, 6);
  ir::Node n = node("Conv");
  n.attrs["pads"] = std::vector<int64_t>{1, 1, 1, 1};
  n.attrs["strides"] = std::vector<int64_t>{2, 1};
  std::vector<ir::Tensor> out;
  ASSERT_TRUE(tensor_run_node(n, {&x, &w}, out).is_ok());
  ASSERT_EQ(out[0].shape(), (ir::Shape{1, 3, 4, 5}));
  for (int64_t m = 0; m < 3; ++m) {
    for (int64_t oh = 0; oh < 4; ++oh) {
      for (int64_t ow = 0; ow < 5; ++ow) {
        double want = 0;
        for (int64_t c = 0; c < 2; ++c) {
          for (int64_t kh = 0; kh < 3; ++kh) {
            for (int64_t kw = 0; kw < 3; ++kw) {
              const int64_t h = oh * 2 - 1 + kh, ww = ow - 1 + kw;
              if (h < 0 || h >= 7 || ww < 0 || ww >= 5) continue;
              want += double(x.data<float>()[(c * 7 + h) * 5 + ww]) * w.data<float>()[((m * 2 + c) * 3 + kh) * 3 + kw];
            }
          }
        }
        EXPECT_NEAR(out[0].data<float>()[(m * 4 + oh) * 5 + ow], want, 1e-5);
      }
    }
  }
}

TEST(TensorKernels, ReshapeSharesStorageAndInfersMinusOne) {
  const ir::Tensor x = random_f32({6, 4}, 7);
  ir::Tensor shape(ir::DType::kI64, {2});
  shape.mutable_data<int64_t>()[0] = -1;
  shape.mutable_data<int64_t>()[1] = 3;
  std::vector<ir::Tensor> out;
  ASSERT_TRUE(tensor_run_node(node("Reshape"), {&x, &shape}, out).is_ok());
  EXPECT_EQ(out[0].shape(), (ir::Shape{8, 3}));
  EXPECT_EQ(out[0].bytes(), x.bytes());
}

TEST(TensorKernels, GatherRefusesAnOutOfRangeIndex) {
  const ir::Tensor x = random_f32({4, 3}, 8);
  ir::Tensor idx(ir::DType::kI64, {1});
  idx.mutable_data<int64_t>()[0] = 4;
  std::vector<ir::Tensor> out;
  Status st = tensor_run_node(node("Gather"), {&x, &idx}, out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("out of range"), std::string::npos);
}

TEST(TensorGraphRunner, ChecksInputsBeforeRunning) {
  ir::Graph g;
  const int64_t batch = g.dim_symbol("batch");
  ir::ValueId a = g.add_value("a", ir::DType::kF32, {batch, 3});
  ir::ValueId b = g.add_value("b", ir::DType::kF32, {batch, 3});
  ir::ValueId c = g.add_value("c", ir::DType::kF32, {batch, 3});
  g.inputs() = {a, b};
  ir::Node n = node("Add");
  n.name = "sum";
  n.inputs = {a, b};
  n.outputs = {c};
  g.nodes().push_back(n);
  g.outputs() = {c};
  ASSERT_TRUE(ir::verify(g).is_ok());
  auto runner = TensorGraphRunner::create(g);
  ASSERT_TRUE(runner);
  auto ok = (*runner)->run({{"a", random_f32({2, 3}, 1)}, {"b", random_f32({2, 3}, 2)}});
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ((*ok)[0].second.shape(), (ir::Shape{2, 3}));
  auto missing = (*runner)->run({{"a", random_f32({2, 3}, 1)}});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("missing input 'b'"), std::string::npos);
  auto bound = (*runner)->run({{"a", random_f32({2, 3}, 1)}, {"b", random_f32({4, 3}, 2)}});
  ASSERT_FALSE(bound);
  EXPECT_NE(bound.status().message().find("'batch'"), std::string::npos);
  auto wrong = (*runner)->run({{"a", random_f32({2, 4}, 1)}, {"b", random_f32({2, 4}, 2)}});
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.status().message().find("[batch,3]"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {

// Bilinear resampling with half-pixel centres, written out directly: out [1, 1, 13, 41] from
// x [1, 1, 7, 83] (one axis up, one down).
TEST(TensorKernels, ResizeLinearMatchesADirectBilinearReference) {
  const ir::Tensor x = random_f32({1, 1, 7, 83}, 5);
  ir::Tensor sizes(ir::DType::kI64, {4});
  const int64_t want_shape[] = {1, 1, 13, 41};
  for (int i = 0; i < 4; ++i) sizes.mutable_data<int64_t>()[i] = want_shape[i];
  ir::Node n = node("Resize");
  n.attrs["mode"] = std::string("linear");
  std::vector<ir::Tensor> out;
  ASSERT_TRUE(tensor_run_node(n, {&x, nullptr, nullptr, &sizes}, out).is_ok());
  ASSERT_EQ(out[0].shape(), (ir::Shape{1, 1, 13, 41}));
  auto source = [](int64_t o, int64_t in_len, int64_t out_len, int64_t& i0, int64_t& i1, double& w) {
    const double scale = static_cast<double>(out_len) / static_cast<double>(in_len);
    const double c = std::clamp((static_cast<double>(o) + 0.5) / scale - 0.5, 0.0, static_cast<double>(in_len - 1));
    i0 = static_cast<int64_t>(std::floor(c));
    i1 = std::min(i0 + 1, in_len - 1);
    w = c - static_cast<double>(i0);
  };
  for (int64_t r = 0; r < 13; ++r) {
    for (int64_t c = 0; c < 41; ++c) {
      int64_t r0, r1, c0, c1;
      double wr, wc;
      source(r, 7, 13, r0, r1, wr);
      source(c, 83, 41, c0, c1, wc);
      auto at = [&](int64_t i, int64_t j) { return static_cast<double>(x.data<float>()[i * 83 + j]); };
      const double want = (1 - wr) * ((1 - wc) * at(r0, c0) + wc * at(r0, c1)) + wr * ((1 - wc) * at(r1, c0) + wc * at(r1, c1));
      ASSERT_NEAR(out[0].data<float>()[r * 41 + c], want, 1e-5) << r << "," << c;
    }
  }
}

TEST(TensorKernels, ScatterElementsRefusesAnIndexOutOfRange) {
  const ir::Tensor data = random_f32({3, 4}, 6), updates = random_f32({1, 2}, 7);
  ir::Tensor idx(ir::DType::kI64, {1, 2});
  idx.mutable_data<int64_t>()[0] = 1;
  idx.mutable_data<int64_t>()[1] = 4;
  ir::Node n = node("ScatterElements");
  n.attrs["axis"] = int64_t{1};
  std::vector<ir::Tensor> out;
  Status st = tensor_run_node(n, {&data, &idx, &updates}, out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("node 'n' (ScatterElements): index 4 is out of range"), std::string::npos) << st.message();
  idx.mutable_data<int64_t>()[1] = -1;  // counts from the end: column 3
  ASSERT_TRUE(tensor_run_node(n, {&data, &idx, &updates}, out).is_ok());
  EXPECT_EQ(out[0].data<float>()[1], updates.data<float>()[0]);
  EXPECT_EQ(out[0].data<float>()[3], updates.data<float>()[1]);
  EXPECT_EQ(out[0].data<float>()[4], data.data<float>()[4]);
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {

// Conv over odd sizes against a direct reference: x [2, C, 9, 13], w [M, C/group, 3, 3], stride 2,
// pads 1, dilation 1; group 2 with 5 outputs per group (the im2col + matmul path) and depthwise
// (the direct f32 path).
TEST(TensorKernels, GroupedAndDepthwiseConvMatchADirectReference) {
  struct Case {
    int64_t C, M, group;
  };
  for (const Case& k : {Case{6, 10, 2}, Case{7, 7, 7}}) {
    const int64_t N = 2, H = 9, W = 13, cg = k.C / k.group, mg = k.M / k.group;
    const ir::Tensor x = random_f32({N, k.C, H, W}, 8), w = random_f32({k.M, cg, 3, 3}, 9), b = random_f32({k.M}, 10);
    ir::Node n = node("Conv");
    n.attrs["group"] = k.group;
    n.attrs["strides"] = std::vector<int64_t>{2, 2};
    n.attrs["pads"] = std::vector<int64_t>{1, 1, 1, 1};
    std::vector<ir::Tensor> out;
    ASSERT_TRUE(tensor_run_node(n, {&x, &w, &b}, out).is_ok());
    const int64_t OH = (H + 2 - 3) / 2 + 1, OW = (W + 2 - 3) / 2 + 1;
    ASSERT_EQ(out[0].shape(), (ir::Shape{N, k.M, OH, OW}));
    for (int64_t bi = 0; bi < N; ++bi) {
      for (int64_t m = 0; m < k.M; ++m) {
        for (int64_t oh = 0; oh < OH; ++oh) {
          for (int64_t ow = 0; ow < OW; ++ow) {
            double s = b.data<float>()[m];
            for (int64_t c = 0; c < cg; ++c) {
              for (int64_t i = 0; i < 3; ++i) {
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t h = oh * 2 - 1 + i, ww = ow * 2 - 1 + j;
                  if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                  const int64_t ci = (m / mg) * cg + c;
                  s += static_cast<double>(x.data<float>()[((bi * k.C + ci) * H + h) * W + ww]) *
                       w.data<float>()[((m * cg + c) * 3 + i) * 3 + j];
                }
              }
            }
            ASSERT_NEAR(out[0].data<float>()[((bi * k.M + m) * OH + oh) * OW + ow], s, 1e-4)
                << "group " << k.group << " at " << bi << "," << m << "," << oh << "," << ow;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cpu

namespace kiln::cpu {
namespace {

ir::Tensor to_f64(const ir::Tensor& t) {
  ir::Tensor out(ir::DType::kF64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.mutable_data<double>()[i] = t.data<float>()[i];
  return out;
}

// The f32 depthwise path (one channel a group, 2-D) against the general f64 loop, over strides,
// asymmetric pads and dilations that leave some outputs with no tap in a row or column.
TEST(TensorKernels, DepthwiseConvMatchesTheGeneralLoop) {
  struct Case {
    std::vector<int64_t> strides, pads, dilations, kernel;
  };
  const Case cases[] = {{{1, 1}, {1, 1, 1, 1}, {1, 1}, {3, 3}},
                        {{2, 1}, {1, 0, 2, 1}, {1, 2}, {3, 3}},
                        {{2, 2}, {2, 2, 2, 2}, {1, 1}, {5, 5}},
                        {{1, 3}, {0, 4, 0, 4}, {2, 1}, {2, 3}}};
  for (const Case& c : cases) {
    for (bool with_bias : {true, false}) {
      const ir::Tensor x = random_f32({2, 5, 9, 11}, 21), w = random_f32({5, 1, c.kernel[0], c.kernel[1]}, 22);
      const ir::Tensor b = random_f32({5}, 23);
      ir::Node n = node("Conv");
      n.attrs["group"] = int64_t{5};
      n.attrs["strides"] = c.strides;
      n.attrs["pads"] = c.pads;
      n.attrs["dilations"] = c.dilations;
      n.attrs["kernel_shape"] = c.kernel;
      std::vector<ir::Tensor> fast, general;
      const ir::Tensor x64 = to_f64(x), w64 = to_f64(w), b64 = to_f64(b);
      ASSERT_TRUE(tensor_run_node(n, with_bias ? TensorInputs{&x, &w, &b} : TensorInputs{&x, &w}, fast).is_ok());
      ASSERT_TRUE(
          tensor_run_node(n, with_bias ? TensorInputs{&x64, &w64, &b64} : TensorInputs{&x64, &w64}, general).is_ok());
      ASSERT_EQ(fast[0].shape(), general[0].shape());
      ASSERT_EQ(fast[0].dtype(), ir::DType::kF32);
      for (int64_t i = 0; i < general[0].numel(); ++i) {
        ASSERT_NEAR(fast[0].data<float>()[i], general[0].data<double>()[i], 1e-5) << i;
      }
    }
  }
}

// TfIdfVectorizer counts the pool's n-grams, bigrams at skips 0 and 1 and unigrams once, into
// their columns (worked out by hand), and weighs them by mode; min_gram_length drops unigrams.
TEST(TensorKernels, TfIdfVectorizerCountsPoolNgramsWithSkips) {
  ir::Tensor x(ir::DType::kI64, {2, 6});
  const int64_t tokens[] = {2, 3, 4, 2, 3, 5, 3, 4, 9, 2, 9, 3};
  std::copy(std::begin(tokens), std::end(tokens), x.mutable_data<int64_t>());
  ir::Node n;
  n.op = "TfIdfVectorizer";
  n.name = "tfidf";
  n.outputs.resize(1);
  auto with = [&](const std::string& mode, int64_t min_n) {
    n.attrs = {{"max_gram_length", int64_t{2}}, {"min_gram_length", min_n}, {"max_skip_count", int64_t{1}},
               {"mode", mode}, {"ngram_counts", std::vector<int64_t>{0, 2}},
               {"ngram_indexes", std::vector<int64_t>{0, 1, 2, 3}},
               {"pool_int64s", std::vector<int64_t>{2, 3, 2, 3, 3, 4}},
               {"weights", std::vector<double>{0.5, 1.0, 2.0, 4.0}}};
    std::vector<ir::Tensor> out;
    EXPECT_TRUE(tensor_run_node(n, {&x}, out).is_ok());
    const ir::Tensor& y = out.at(0);
    EXPECT_EQ(y.shape(), (ir::Shape{2, 4}));
    return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
  };
  EXPECT_EQ(with("TF", 1), (std::vector<float>{2, 2, 2, 1, 1, 2, 1, 1}));
  EXPECT_EQ(with("IDF", 1), (std::vector<float>{0.5f, 1, 2, 4, 0.5f, 1, 2, 4}));
  EXPECT_EQ(with("TFIDF", 1), (std::vector<float>{1, 2, 4, 4, 0.5f, 2, 2, 4}));
  EXPECT_EQ(with("TF", 2), (std::vector<float>{0, 0, 2, 1, 0, 0, 1, 1}));
}

}  // namespace
}  // namespace kiln::cpu
