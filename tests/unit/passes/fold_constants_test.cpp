// passes/fold_constants.cpp: build-time ops on weights become weights with composed loaders;
// general ops on constants are evaluated once through the backend's NodeEvaluator.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "ir/ops.h"
#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(FoldConstants, TransposesTheWeight) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fold_constants(g, {}));
  EXPECT_EQ(count_op(g, "transpose"), 0u);
  const auto& w = g.weights().at("out.w.T");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{4, 6}));
  auto v = w.load();
  ASSERT_TRUE(v);
  // element [r, c] of the transpose is element [c, r] = 500 + c*4 + r of the source
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 6; ++c) {
      EXPECT_EQ((*v)[static_cast<size_t>(r * 6 + c)], 500.0f + static_cast<float>(c * 4 + r));
    }
  }
  // The matmul reads the new weight, and the source, read by nothing else, is gone.
  const ir::Node* out = node_named(g, "out");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(g.value(out->inputs[1]).name, "out.w.T");
  EXPECT_EQ(g.weights().count("out.w"), 0u);
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
}

TEST(FoldConstants, NormalizesRowsToUnitLength) {
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, 3});
  g.inputs() = {x};
  // Rows (3, 4, 0), (0, 0, 0), (1, -1, 1): norms 5, 0 (kept at zero: divided by 1e-12), sqrt 3.
  const ValueId w = g.add_weight("head.w", f32_weight({3, 3}, {3, 4, 0, 0, 0, 0, 1, -1, 1}));
  const ValueId n = g.add_node1("normalize_rows", "head.w.normalized", {w});
  g.outputs() = {g.add_node1("matmul", "head", {x, n})};
  ASSERT_TRUE(run_fold_constants(g, {}));
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  ASSERT_EQ(g.nodes().size(), 1u);
  const std::vector<float> v = load_f32(g, g.nodes()[0].inputs[1]);
  const float r3 = 1.0f / std::sqrt(3.0f);
  const std::vector<float> want = {0.6f, 0.8f, 0.0f, 0.0f, 0.0f, 0.0f, r3, -r3, r3};
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], want[i], 1e-6f) << i;
}

TEST(FoldConstants, ABuildTimeOpOnAnActivationIsAnError) {
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {3, 4});
  g.inputs() = {x};
  g.outputs() = {g.add_node1("transpose", "xt", {x})};
  const Status s = run_fold_constants(g, {});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'xt'"), std::string::npos) << s.message();
}

// Evaluates Add of two f32 tensors of one shape; counts its calls.
class AddEvaluator : public NodeEvaluator {
 public:
  bool can_evaluate(const std::string& op) const override { return op == "Add" || op == "Identity"; }
  Expected<std::vector<ir::Tensor>> evaluate(const ir::Node& node, const std::vector<const ir::Tensor*>& in) override {
    ++calls;
    if (node.op != "Add" || in.size() != 2 || in[0]->shape() != in[1]->shape()) return unimplemented("not in the test");
    ir::Tensor out(DType::kF32, in[0]->shape());
    for (int64_t i = 0; i < out.numel(); ++i) {
      out.mutable_data<float>()[i] = in[0]->data<float>()[i] + in[1]->data<float>()[i];
    }
    return std::vector<ir::Tensor>{out};
  }
  int calls = 0;
};

TEST(FoldConstants, EvaluatesATensorOpOnConstantsOnce) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {3});
  const ValueId c1 = b.constant({3}, {1, 2, 3});
  const ValueId c2 = b.constant({3}, {10, 20, 30});
  const ValueId sum = b.node("Add", {c1, c2});
  const std::string sum_name = b.g.value(sum).name;
  b.output(b.node("Mul", {x, sum}));
  AddEvaluator ev;
  PassContext ctx;
  ctx.evaluator = &ev;
  std::vector<std::string> notes;
  ctx.log = [&](const std::string& m) { notes.push_back(m); };
  ASSERT_TRUE(run_fold_constants(b.g, ctx));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  EXPECT_EQ(ev.calls, 1);
  ASSERT_EQ(b.g.nodes().size(), 1u);
  const ir::Node& mul = b.g.nodes()[0];
  EXPECT_EQ(mul.op, "Mul");
  ASSERT_EQ(mul.inputs.size(), 2u);
  EXPECT_EQ(mul.inputs[0], x);
  EXPECT_EQ(b.g.value(mul.inputs[1]).name, sum_name + "/folded");
  EXPECT_EQ(load_f32(b.g, mul.inputs[1]), (std::vector<float>{11, 22, 33}));
  // The operands, read by nothing now, are pruned.
  EXPECT_EQ(b.g.weights().size(), 1u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("folded 1 constant nodes"), std::string::npos) << notes[0];
}

TEST(FoldConstants, LeavesTensorOpsThatAreNotAllConstantOrThatMakeGraphOutputs) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {3});
  const ValueId c1 = b.constant({3}, {1, 2, 3});
  const ValueId c2 = b.constant({3}, {4, 5, 6});
  b.output(b.node("Add", {x, c1}));                // reads an activation
  b.output(b.node("Add", {c1, c2}));               // constant, but a graph output keeps its node
  b.output(b.node("Identity", {c2}));              // how an ONNX Constant reaches an output
  b.output(b.node("Sub", {c2, c1}));               // the evaluator cannot
  const std::string before = snapshot(b.g);
  AddEvaluator ev;
  PassContext ctx;
  ctx.evaluator = &ev;
  ASSERT_TRUE(run_fold_constants(b.g, ctx));
  EXPECT_EQ(snapshot(b.g), before);
  EXPECT_EQ(ev.calls, 0);
}

TEST(FoldConstants, WithoutAnEvaluatorTensorOpsStay) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {3});
  const ValueId sum = b.node("Add", {b.constant({3}, {1, 2, 3}), b.constant({3}, {4, 5, 6})});
  b.output(b.node("Mul", {x, sum}));
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_fold_constants(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
}

}  // namespace
}  // namespace kiln::passes
