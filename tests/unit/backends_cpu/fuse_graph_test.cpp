// The graph-rewriting passes of general graphs (passes/fuse_subgraphs.cpp, fuse_epilogues.cpp,
// transpose_matmul_weights.cpp, pack_matmul_weights.cpp, and the calibrated int8 of quantize_int8.cpp) on small graphs
// written the way exporters write them: each graph runs through the CPU runner before and after
// the passes, and must give the same outputs (int8: within its quantisation error) with the nodes
// the passes promise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <random>

#include "backends/cpu/tensor/tensor_graph_runner.h"
#include "ir/epilogue.h"
#include "ir/ops.h"
#include "passes/pass.h"
#include "unit/backends_cpu/tensor_test_util.h"

namespace kiln::cpu {
namespace {

ir::Tensor random_tensor(const ir::Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  ir::Tensor t(ir::DType::kF32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

// A graph under construction, with helpers for constants and nodes.
struct Builder {
  ir::Graph g;
  int next = 0;

  ir::ValueId input(const std::string& name, const ir::Shape& shape) {
    const ir::ValueId v = g.add_value(name, ir::DType::kF32, shape);
    g.inputs().push_back(v);
    return v;
  }
  ir::ValueId constant(const ir::Tensor& t) {
    ir::WeightEntry w;
    w.shape = t.shape();
    w.load = [t]() -> Expected<std::vector<float>> { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
    return g.add_weight("c" + std::to_string(next++), std::move(w));
  }
  ir::ValueId scalar(float v) {
    ir::Tensor t(ir::DType::kF32, {});
    t.mutable_data<float>()[0] = v;
    return constant(t);
  }
  ir::ValueId axes(std::vector<int64_t> a) {
    ir::WeightEntry w;
    w.shape = {static_cast<int64_t>(a.size())};
    w.dtype = ir::DType::kI64;
    w.load_bytes = [a]() -> Expected<std::vector<std::byte>> {
      std::vector<std::byte> b(a.size() * sizeof(int64_t));
      std::memcpy(b.data(), a.data(), b.size());
      return b;
    };
    return g.add_weight("c" + std::to_string(next++), std::move(w));
  }
  ir::ValueId node(const std::string& op, std::vector<ir::ValueId> in, std::map<std::string, ir::Attr> attrs = {}) {
    const std::string name = op + std::to_string(next++);
    const ir::ValueId out = g.add_value(name + ".out", ir::DType::kF32, {});
    g.value(out).shape_known = false;
    ir::Node n;
    n.op = op;
    n.name = name;
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attrs = std::move(attrs);
    g.nodes().push_back(std::move(n));
    return out;
  }
};

// Runs `graph` on `inputs` with its weights produced by their loaders (as the engine writer would
// store them).
std::vector<ir::Tensor> run_graph(ir::Graph graph, const std::map<std::string, ir::Tensor>& inputs) {
  std::deque<std::vector<std::byte>> storage;
  for (auto& [name, w] : graph.weights()) {
    std::vector<std::byte> bytes;
    if (w.dtype == ir::DType::kF32) {
      auto v = w.load();
      EXPECT_TRUE(v) << name;
      if (!v) return {};
      bytes.resize(v->size() * sizeof(float));
      std::memcpy(bytes.data(), v->data(), bytes.size());
    } else {
      auto v = w.load_bytes();
      EXPECT_TRUE(v) << name;
      if (!v) return {};
      bytes = std::move(*v);
    }
    storage.push_back(std::move(bytes));
    w.stored = std::span<const std::byte>(storage.back());
  }
  auto runner = TensorGraphRunner::create(graph);
  EXPECT_TRUE(runner) << runner.status().message();
  if (!runner) return {};
  auto out = (*runner)->run(inputs);
  EXPECT_TRUE(out) << out.status().message();
  std::vector<ir::Tensor> result;
  if (out) {
    for (auto& [name, t] : *out) result.push_back(t);
  }
  return result;
}

Status run_fusions(ir::Graph& g) {
  passes::PassContext ctx;
  KILN_RETURN_IF_ERROR(passes::run_fuse_subgraphs(g, ctx));
  KILN_RETURN_IF_ERROR(passes::run_fuse_epilogues(g, ctx));
  KILN_RETURN_IF_ERROR(passes::run_fuse_attention(g, ctx));
  KILN_RETURN_IF_ERROR(passes::run_transpose_matmul_weights(g, ctx));
  KILN_RETURN_IF_ERROR(passes::run_eliminate_dead_nodes(g, ctx));
  return ir::verify(g);
}

// Runs the graph, fuses it, runs it again; the outputs must agree within `tolerance` (relative to
// 1 + |value|). Returns the fused graph's ops in order.
std::vector<std::string> fuse_and_compare(Builder& b, const std::map<std::string, ir::Tensor>& inputs,
                                          double tolerance = 2e-6) {
  const std::vector<ir::Tensor> before = run_graph(b.g, inputs);
  EXPECT_TRUE(run_fusions(b.g).is_ok());
  const std::vector<ir::Tensor> after = run_graph(b.g, inputs);
  EXPECT_EQ(before.size(), after.size());
  for (size_t i = 0; i < std::min(before.size(), after.size()); ++i) {
    EXPECT_EQ(before[i].shape(), after[i].shape());
    if (before[i].shape() != after[i].shape()) continue;
    double worst = 0.0;
    for (int64_t j = 0; j < before[i].numel(); ++j) {
      const double want = ir::tensor_get_f64(before[i], j), got = ir::tensor_get_f64(after[i], j);
      worst = std::max(worst, std::fabs(got - want) / (1.0 + std::fabs(want)));
    }
    EXPECT_LE(worst, tolerance) << "output " << i;
  }
  std::vector<std::string> ops;
  for (const auto& n : b.g.nodes()) ops.push_back(n.op);
  return ops;
}

// x * Clip(x + 3, 0, 6) / 6, as PyTorch's and Paddle's exporters write HardSwish.
ir::ValueId hard_swish_subgraph(Builder& b, ir::ValueId x) {
  const ir::ValueId c = b.node("Clip", {b.node("Add", {x, b.scalar(3.0f)}), b.scalar(0.0f), b.scalar(6.0f)});
  return b.node("Div", {b.node("Mul", {x, c}), b.scalar(6.0f)});
}

TEST(FuseGraph, ConvWithAffineHardSwishAndAffineBecomesOneConv) {
  for (int64_t group : {1, 4}) {  // a dense and a depthwise convolution
    SCOPED_TRACE("group " + std::to_string(group));
    Builder b;
    const ir::ValueId x = b.input("x", {2, 4, 9, 11});
    const ir::ValueId y = b.node("Conv", {x, b.constant(random_tensor({4, 4 / group, 3, 3}, 1)), b.constant(random_tensor({4}, 2))},
                                 {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                  {"group", group}});
    // Paddle's learnable affine around the activation: a scalar scale, a per-channel shift.
    const ir::ValueId a = b.node("Add", {b.node("Mul", {b.scalar(1.7f), y}), b.constant(random_tensor({1, 4, 1, 1}, 3))});
    const ir::ValueId h = hard_swish_subgraph(b, a);
    b.g.outputs() = {b.node("Add", {b.node("Mul", {h, b.scalar(0.6f)}), b.scalar(-0.2f)})};
    const auto ops = fuse_and_compare(b, {{"x", random_tensor({2, 4, 9, 11}, 4, -3, 3)}});
    EXPECT_EQ(ops, std::vector<std::string>{"Conv"});
    const ir::Epilogue e = ir::node_epilogue(b.g.nodes()[0]);
    EXPECT_EQ(e.activation, ir::Activation::kHardSwish);
    EXPECT_NEAR(e.scale, 0.6, 1e-7);
    EXPECT_NEAR(e.shift, -0.2, 1e-7);
  }
}

TEST(FuseGraph, ConvTransposeWithBiasBatchNormAndReluBecomesOneNode) {
  Builder b;
  const ir::ValueId x = b.input("x", {1, 3, 5, 6});
  const ir::ValueId y = b.node("ConvTranspose", {x, b.constant(random_tensor({3, 4, 2, 2}, 1))},
                               {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  const ir::ValueId biased = b.node("Add", {y, b.constant(random_tensor({1, 4, 1, 1}, 2))});
  const ir::ValueId bn = b.node("BatchNormalization",
                                {biased, b.constant(random_tensor({4}, 3, 0.5f, 2.0f)), b.constant(random_tensor({4}, 4)),
                                 b.constant(random_tensor({4}, 5)), b.constant(random_tensor({4}, 6, 0.1f, 2.0f))},
                                {{"epsilon", 1e-5}});
  b.g.outputs() = {b.node("Relu", {bn})};
  EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({1, 3, 5, 6}, 7)}}), std::vector<std::string>{"ConvTranspose"});
}

TEST(FuseGraph, MatMulWithBiasAndSwishBecomesOneMatMulOnTransposedWeights) {
  Builder b;
  const ir::ValueId x = b.input("x", {2, 5, 12});
  const ir::ValueId y = b.node("Add", {b.node("MatMul", {x, b.constant(random_tensor({12, 7}, 1))}), b.constant(random_tensor({7}, 2))});
  const ir::ValueId s = b.node("Sigmoid", {b.node("Mul", {y, b.scalar(1.0f)})});
  b.g.outputs() = {b.node("Mul", {y, s})};
  EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({2, 5, 12}, 3)}}), std::vector<std::string>{"MatMul"});
  const ir::Node& mm = b.g.nodes()[0];
  EXPECT_EQ(mm.inputs.size(), 3u);
  EXPECT_EQ(mm.attr_int("kiln.b_transposed"), 1);
  EXPECT_EQ(b.g.weight(mm.inputs[1]).shape, (ir::Shape{7, 12}));
  EXPECT_EQ(ir::node_epilogue(mm).activation, ir::Activation::kSwish);
}

// The weights packed for the register tiles (ir/packed_weight.h) give the products of the plain
// MatMul, with the fused bias and activation, on every ISA, over odd row and column counts (a
// partial last panel, a partial last tile of 12 rows, a vector operand, several blocks of rows
// and groups of panels with a partial panel in the last).
TEST(FuseGraph, MatMulOnPackedWeightsMatchesThePlainProduct) {
  struct Case {
    ir::Shape x;
    int64_t n;
  };
  const std::vector<Case> cases = {{{2, 5, 12}, 7}, {{25, 37}, 70}, {{13, 1}, 33},
                                   {{300}, 16},     {{3, 1, 64}, 32}, {{26, 130}, 97},
                                   {{400, 300}, 270}};
  for (const Case& c : cases) {
    const int64_t k = c.x.back();
    SCOPED_TRACE(ir::shape_to_string(c.x) + " x [" + std::to_string(k) + ", " + std::to_string(c.n) + "]");
    Builder b;
    const ir::ValueId x = b.input("x", c.x);
    const ir::ValueId y = b.node("Add", {b.node("MatMul", {x, b.constant(random_tensor({k, c.n}, 1))}), b.constant(random_tensor({c.n}, 2))});
    b.g.outputs() = {b.node("Relu", {y})};
    const std::map<std::string, ir::Tensor> inputs = {{"x", random_tensor(c.x, 3)}};
    const std::vector<ir::Tensor> before = run_graph(b.g, inputs);
    ASSERT_TRUE(run_fusions(b.g).is_ok());
    passes::PassContext ctx;
    ASSERT_TRUE(passes::run_pack_matmul_weights(b.g, ctx).is_ok());
    ASSERT_EQ(b.g.nodes().size(), 1u);
    const ir::Node& mm = b.g.nodes()[0];
    EXPECT_EQ(mm.attr_int("kiln.b_packed"), c.n);
    EXPECT_FALSE(mm.has_attr("kiln.b_transposed"));
    EXPECT_EQ(b.g.weight(mm.inputs[1]).shape, (ir::Shape{(c.n + 31) / 32, k, 32}));
    for (Isa isa : test_util::isas()) {
      SCOPED_TRACE(std::string(isa_name(isa)));
      ASSERT_TRUE(isa_override(isa).is_ok());
      const std::vector<ir::Tensor> after = run_graph(b.g, inputs);
      ASSERT_EQ(after.size(), 1u);
      // Both sides round in float, in different orders: the gap grows with the sum's length.
      EXPECT_LE(test_util::worst(after[0], before[0]), 2e-6 * std::max(1.0, std::sqrt(static_cast<double>(k) / 16.0)));
    }
    ASSERT_TRUE(isa_override(std::nullopt).is_ok());
  }
}

TEST(FuseGraph, GeluInTheExportersOrdersBecomesGelu) {
  for (int order = 0; order < 3; ++order) {
    SCOPED_TRACE("order " + std::to_string(order));
    Builder b;
    const ir::ValueId x = b.input("x", {3, 17});
    const ir::ValueId e = b.node("Erf", {b.node("Div", {x, b.scalar(1.4142135f)})});
    const ir::ValueId a = b.node("Add", {e, b.scalar(1.0f)});
    ir::ValueId y;
    if (order == 0) y = b.node("Mul", {b.node("Mul", {x, a}), b.scalar(0.5f)});
    if (order == 1) y = b.node("Mul", {b.node("Mul", {x, b.scalar(0.5f)}), a});
    if (order == 2) y = b.node("Mul", {x, b.node("Mul", {a, b.scalar(0.5f)})});
    b.g.outputs() = {b.node("Relu", {y})};  // a reader, so that Gelu is not the graph's last node
    EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({3, 17}, 1, -4, 4)}}),
              (std::vector<std::string>{"Gelu", "Relu"}));
  }
}

TEST(FuseGraph, TanhGeluBecomesGelu) {
  Builder b;
  const ir::ValueId x = b.input("x", {4, 19});
  const ir::ValueId cubic = b.node("Mul", {b.node("Pow", {x, b.scalar(3.0f)}), b.scalar(0.044715f)});
  const ir::ValueId t = b.node("Tanh", {b.node("Mul", {b.node("Add", {x, cubic}), b.scalar(0.7978845608f)})});
  const ir::ValueId y = b.node("Mul", {b.node("Mul", {x, b.scalar(0.5f)}), b.node("Add", {t, b.scalar(1.0f)})});
  b.g.outputs() = {b.node("Relu", {y})};
  EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({4, 19}, 1, -4, 4)}}), (std::vector<std::string>{"Gelu", "Relu"}));
  EXPECT_EQ(b.g.nodes()[0].attr_str("approximate"), "tanh");
}

TEST(FuseGraph, MatMulSoftmaxMatMulBecomesOneAttentionNode) {
  // No mask; a padding mask per batch; a causal [S, T] mask of lower rank; a mask per row that
  // broadcasts along the keys; a full one.
  const std::vector<ir::Shape> masks = {{}, {2, 1, 1, 6}, {5, 6}, {2, 3, 5, 1}, {2, 3, 5, 6}};
  for (const ir::Shape& mask_shape : masks) {
    const bool with_mask = !mask_shape.empty();
    SCOPED_TRACE(with_mask ? "mask " + ir::shape_to_string(mask_shape) : "without a mask");
    Builder b;
    const ir::ValueId q = b.input("q", {2, 3, 5, 8}), kt = b.input("kt", {2, 3, 8, 6}), v = b.input("v", {2, 3, 6, 4});
    ir::ValueId s = b.node("Div", {b.node("MatMul", {q, kt}), b.scalar(2.828427f)});
    if (with_mask) s = b.node("Add", {s, b.input("mask", mask_shape)});
    const ir::ValueId p = b.node("Cast", {b.node("Softmax", {s}, {{"axis", int64_t{-1}}})}, {{"to", std::string("f32")}});
    b.g.outputs() = {b.node("MatMul", {p, v})};
    std::map<std::string, ir::Tensor> in = {{"q", random_tensor({2, 3, 5, 8}, 1, -2, 2)},
                                            {"kt", random_tensor({2, 3, 8, 6}, 2, -2, 2)},
                                            {"v", random_tensor({2, 3, 6, 4}, 3)}};
    if (with_mask) {
      ir::Tensor mask = random_tensor(mask_shape, 4, -3, 3);
      // Some keys masked out entirely, as padding masks do.
      for (int64_t i = 0; i < mask.numel(); i += 3) mask.mutable_data<float>()[i] = -1e9f;
      mask.mutable_data<float>()[mask.numel() - 1] = 0.0f;
      in["mask"] = mask;
    }
    EXPECT_EQ(fuse_and_compare(b, in), std::vector<std::string>{"kiln.Attention"});
    EXPECT_NEAR(b.g.nodes()[0].attr_float("scale"), 1.0 / 2.828427, 1e-7);
  }
}

// Attention between the exporters' head-splitting Transposes: q and v [B, S, H, D] -> [B, H, S, D],
// k -> [B, H, D, T], the output back to [B, S, H, Dv]. The Transposes go into the node, which then
// reads and writes [B, S, H, D] as they lie (with and without a padding mask over [B, H, S, T]).
TEST(FuseGraph, HeadSplittingTransposesGoIntoTheAttentionNode) {
  for (const bool with_mask : {false, true}) {
    SCOPED_TRACE(with_mask ? "with a mask" : "without a mask");
    Builder b;
    const ir::ValueId qs = b.input("q", {2, 5, 3, 8}), ks = b.input("k", {2, 37, 3, 8}), vs = b.input("v", {2, 37, 3, 4});
    const auto transpose = [&](ir::ValueId x, std::vector<int64_t> perm) {
      return b.node("Transpose", {x}, {{"perm", std::move(perm)}});
    };
    const ir::ValueId q = transpose(qs, {0, 2, 1, 3}), kt = transpose(ks, {0, 2, 3, 1}), v = transpose(vs, {0, 2, 1, 3});
    ir::ValueId s = b.node("Mul", {b.node("MatMul", {q, kt}), b.scalar(0.35f)});
    if (with_mask) s = b.node("Add", {s, b.input("mask", {2, 1, 1, 37})});
    const ir::ValueId p = b.node("Softmax", {s}, {{"axis", int64_t{-1}}});
    b.g.outputs() = {b.node("Relu", {transpose(b.node("MatMul", {p, v}), {0, 2, 1, 3})})};
    std::map<std::string, ir::Tensor> in = {{"q", random_tensor({2, 5, 3, 8}, 1, -2, 2)},
                                            {"k", random_tensor({2, 37, 3, 8}, 2, -2, 2)},
                                            {"v", random_tensor({2, 37, 3, 4}, 3)}};
    if (with_mask) {
      ir::Tensor mask = random_tensor({2, 1, 1, 37}, 4, -3, 3);
      for (int64_t i = 0; i < mask.numel(); i += 5) mask.mutable_data<float>()[i] = -1e9f;
      in["mask"] = mask;
    }
    EXPECT_EQ(fuse_and_compare(b, in), (std::vector<std::string>{"kiln.Attention", "Relu"}));
    EXPECT_EQ(b.g.nodes()[0].attr_str("kiln.layout"), "bshd");
  }
}

// A Transpose that something else reads too, or one of another permutation, stays; the node then
// keeps the [B, H, S, D] layout.
TEST(FuseGraph, HeadTransposesReadElsewhereStay) {
  for (const bool other_perm : {false, true}) {
    Builder b;
    const ir::ValueId qs = b.input("q", {2, 5, 3, 8}), ks = b.input("k", {2, 6, 3, 8}), vs = b.input("v", {2, 6, 3, 4});
    const auto transpose = [&](ir::ValueId x, std::vector<int64_t> perm) {
      return b.node("Transpose", {x}, {{"perm", std::move(perm)}});
    };
    const ir::ValueId q = transpose(qs, {0, 2, 1, 3}), kt = transpose(ks, {0, 2, 3, 1}), v = transpose(vs, {0, 2, 1, 3});
    const ir::ValueId p = b.node("Softmax", {b.node("MatMul", {q, kt})}, {{"axis", int64_t{-1}}});
    const ir::ValueId y = b.node("MatMul", {p, v});
    if (other_perm) {
      b.g.outputs() = {transpose(y, {0, 1, 3, 2})};
    } else {
      b.g.outputs() = {transpose(y, {0, 2, 1, 3}), b.node("Relu", {q})};
    }
    const std::vector<std::string> ops = fuse_and_compare(b, {{"q", random_tensor({2, 5, 3, 8}, 1, -2, 2)},
                                                              {"k", random_tensor({2, 6, 3, 8}, 2, -2, 2)},
                                                              {"v", random_tensor({2, 6, 3, 4}, 3)}});
    EXPECT_EQ(std::count(ops.begin(), ops.end(), "Transpose"), 4) << (other_perm ? "other permutation" : "q read twice");
    for (const ir::Node& n : b.g.nodes()) {
      if (n.op == "kiln.Attention") {
        EXPECT_FALSE(n.has_attr("kiln.layout"));
      }
    }
  }
}

TEST(FuseGraph, LayerNormSubgraphBecomesLayerNormalization) {
  Builder b;
  const ir::ValueId x = b.input("x", {2, 3, 16});
  const ir::ValueId mean = b.node("ReduceMean", {x, b.axes({-1})}, {{"keepdims", int64_t{1}}});
  const ir::ValueId d = b.node("Sub", {x, mean});
  const ir::ValueId var = b.node("ReduceMean", {b.node("Pow", {d, b.scalar(2.0f)}), b.axes({-1})}, {{"keepdims", int64_t{1}}});
  const ir::ValueId norm = b.node("Div", {d, b.node("Sqrt", {b.node("Add", {var, b.scalar(1e-5f)})})});
  b.g.outputs() = {b.node("Add", {b.node("Mul", {norm, b.constant(random_tensor({16}, 1))}), b.constant(random_tensor({16}, 2))})};
  EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({2, 3, 16}, 3, -2, 5)}}, 1e-5),
            std::vector<std::string>{"LayerNormalization"});
}

// A transformer encoder's residual: LayerNormalization(MatMul(x, W) + bias + x). The residual Add
// goes into the norm; with a residual that broadcasts, too. An Add that something else reads stays.
TEST(FuseGraph, ResidualAddGoesIntoTheLayerNorm) {
  for (const bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "broadcast residual" : "residual of the sum's shape");
    Builder b;
    const ir::Shape rs = broadcast ? ir::Shape{1, 5, 40} : ir::Shape{2, 5, 40};
    const ir::ValueId x = b.input("x", {2, 5, 24}), res = b.input("r", rs);
    const ir::ValueId h = b.node("Add", {b.node("MatMul", {x, b.constant(random_tensor({24, 40}, 1))}),
                                         b.constant(random_tensor({40}, 2))});
    b.g.outputs() = {b.node("LayerNormalization",
                            {b.node("Add", {h, res}), b.constant(random_tensor({40}, 3)), b.constant(random_tensor({40}, 4))},
                            {{"axis", int64_t{-1}}, {"epsilon", 1e-12}})};
    EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({2, 5, 24}, 5)}, {"r", random_tensor(rs, 6, -3, 3)}}, 1e-5),
              (std::vector<std::string>{"MatMul", "kiln.AddLayerNorm"}));
  }
  Builder b;
  const ir::ValueId x = b.input("x", {3, 16}), res = b.input("r", {3, 16});
  const ir::ValueId s = b.node("Add", {x, res});
  b.g.outputs() = {b.node("LayerNormalization", {s, b.constant(random_tensor({16}, 3))}), b.node("Relu", {s})};
  EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({3, 16}, 5)}, {"r", random_tensor({3, 16}, 6)}}),
            (std::vector<std::string>{"Add", "LayerNormalization", "Relu"}));
}

TEST(FuseGraph, ValuesReadOutsideTheSubgraphStopTheFusion) {
  Builder b;
  const ir::ValueId x = b.input("x", {2, 4, 5, 5});
  const ir::ValueId y = b.node("Conv", {x, b.constant(random_tensor({4, 4, 1, 1}, 1))}, {{"kernel_shape", std::vector<int64_t>{1, 1}}});
  const ir::ValueId r = b.node("Relu", {y});
  b.g.outputs() = {r, y};  // the convolution's own output is wanted too
  EXPECT_EQ(fuse_and_compare(b, {{"x", random_tensor({2, 4, 5, 5}, 2)}}), (std::vector<std::string>{"Conv", "Relu"}));
  EXPECT_TRUE(ir::node_epilogue(b.g.nodes()[0]).empty());
}

// Conv (signed input) -> Relu (fused) -> MatMul (never-negative input), calibrated on 32 samples.
struct Int8Graph {
  Builder b;
  std::vector<std::map<std::string, ir::Tensor>> samples;
  Int8Graph() {
    const ir::ValueId x = b.input("x", {1, 3, 16, 16});
    const ir::ValueId y = b.node("Conv", {x, b.constant(random_tensor({8, 3, 3, 3}, 1)), b.constant(random_tensor({8}, 2))},
                                 {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    b.g.outputs() = {b.node("MatMul", {b.node("Relu", {y}), b.constant(random_tensor({16, 6}, 3))})};
    for (uint32_t s = 0; s < 32; ++s) samples.push_back({{"x", random_tensor({1, 3, 16, 16}, 100 + s)}});
  }
};

Status quantize(ir::Graph& g, const passes::Int8Calibration& calibration) {
  CpuNodeEvaluator evaluator;
  passes::PassContext ctx;
  ctx.evaluator = &evaluator;
  ctx.int8 = &calibration;
  return passes::run_quantize_int8(g, ctx);
}

TEST(QuantizeInt8, ConvAndMatMulRunInInt8WithinTheQuantisationError) {
  for (passes::Calibrator c : {passes::Calibrator::kMinMax, passes::Calibrator::kEntropy, passes::Calibrator::kPercentile}) {
    SCOPED_TRACE(passes::calibrator_name(c));
    Int8Graph t;
    ASSERT_TRUE(run_fusions(t.b.g).is_ok());
    const std::map<std::string, ir::Tensor> held_out = {{"x", random_tensor({1, 3, 16, 16}, 999)}};
    const std::vector<ir::Tensor> before = run_graph(t.b.g, held_out);
    const Builder reference = t.b;
    passes::Int8Calibration calibration;
    calibration.calibrator = c;
    calibration.samples = t.samples;
    const Status st = quantize(t.b.g, calibration);
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_TRUE(ir::verify(t.b.g).is_ok());
    std::vector<std::string> ops;
    for (const auto& n : t.b.g.nodes()) ops.push_back(n.op);
    ASSERT_EQ(ops, (std::vector<std::string>{"kiln.QConv", "kiln.QMatMul"}));
    const ir::Node &conv = t.b.g.nodes()[0], &mm = t.b.g.nodes()[1];
    EXPECT_EQ(conv.attr_int("kiln.x_zero_point"), 128);  // the image is signed
    EXPECT_EQ(mm.attr_int("kiln.x_zero_point"), 0);      // after a Relu: all 256 codes above zero
    EXPECT_EQ(ir::node_epilogue(conv).activation, ir::Activation::kRelu);
    if (c == passes::Calibrator::kMinMax) {
      double hi = 0.0;
      for (const auto& s : t.samples) {
        const ir::Tensor& x = s.at("x");
        for (int64_t i = 0; i < x.numel(); ++i) hi = std::max(hi, std::fabs(static_cast<double>(x.data<float>()[i])));
      }
      EXPECT_DOUBLE_EQ(conv.attr_float("kiln.x_scale"), hi / 127);
    }
    // On held-out inputs a value beyond the calibrated range saturates: the error is judged by
    // its root mean square. On a calibration sample under min-max nothing saturates: by its largest.
    const std::vector<ir::Tensor> after = run_graph(t.b.g, held_out);
    ASSERT_EQ(after.size(), 1u);
    ASSERT_EQ(after[0].shape(), before[0].shape());
    double err2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < before[0].numel(); ++i) {
      const double want = before[0].data<float>()[i], d = after[0].data<float>()[i] - want;
      err2 += d * d;
      ref2 += want * want;
    }
    EXPECT_GT(err2, 0.0);  // it did change precision
    EXPECT_LT(std::sqrt(err2 / ref2), 0.015) << "relative RMS error of int8";  // measured: 0.8%
    if (c == passes::Calibrator::kMinMax) {
      const std::vector<ir::Tensor> want = run_graph(reference.g, t.samples[3]), got = run_graph(t.b.g, t.samples[3]);
      double diff = 0.0, range = 0.0;
      for (int64_t i = 0; i < want[0].numel(); ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(got[0].data<float>()[i] - want[0].data<float>()[i])));
        range = std::max(range, static_cast<double>(std::fabs(want[0].data<float>()[i])));
      }
      EXPECT_LT(diff, 0.03 * range) << "max |int8 - f32| " << diff << " of a range of " << range;
    }
  }
}

TEST(QuantizeInt8, SamplesThatDoNotFitTheModelAreErrors) {
  Int8Graph t;
  ASSERT_TRUE(run_fusions(t.b.g).is_ok());
  passes::Int8Calibration calibration;
  calibration.samples = {{{"y", random_tensor({1, 3, 16, 16}, 5)}}};
  Status st = quantize(t.b.g, calibration);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("calibration sample 1 has no input 'x'"), std::string::npos) << st.message();
  ir::Tensor ints(ir::DType::kI64, {1, 3, 16, 16});
  calibration.samples = {{{"x", ints}}};
  st = quantize(t.b.g, calibration);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("input 'x' is i64, the model takes f32"), std::string::npos) << st.message();
  calibration.samples = {{{"x", random_tensor({1, 5, 16, 16}, 6)}}};  // 5 channels for a 3-channel weight
  st = quantize(t.b.g, calibration);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("calibration sample 1: "), std::string::npos) << st.message();
  // A sample without a name serves a one-input model.
  calibration.samples = {{{"", random_tensor({1, 3, 16, 16}, 7)}}};
  EXPECT_TRUE(quantize(t.b.g, calibration).is_ok());
}

}  // namespace
}  // namespace kiln::cpu
