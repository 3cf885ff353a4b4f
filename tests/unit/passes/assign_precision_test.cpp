// passes/assign_precision.cpp: 2-D weights of LLM graphs take the format asked for (or the nearest
// that fits their width), 1-D ones stay f32; general graphs store larger f32 weights as f16/bf16.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(AssignPrecision, MatrixWeightsTakeTheFormatAndVectorsStayF32) {
  // Four columns fit every format without groups: i8 per channel here.
  Graph g = decoder_like();
  PassContext ctx;
  ctx.options.matmul_format = ir::WeightFormat::kI8Channel;
  std::vector<std::string> notes;
  ctx.log = [&](const std::string& m) { notes.push_back(m); };
  ASSERT_TRUE(run_assign_precision(g, ctx));
  for (const auto& [name, w] : g.weights()) {
    EXPECT_EQ(w.format, w.shape.size() == 2 ? ir::WeightFormat::kI8Channel : ir::WeightFormat::kF32) << name;
  }
  EXPECT_TRUE(notes.empty());
  // Without simulation the contents stay exact: the engine writer quantises them.
  EXPECT_EQ(load_f32(g, g.find_value("gate.w"))[1], 301.0f);
}

TEST(AssignPrecision, FallsBackWhenGroupsDoNotFit) {
  Graph g = decoder_like();
  PassContext ctx;
  ctx.options.matmul_format = ir::WeightFormat::kI4Group32;  // K = 4 is not a multiple of 32
  std::vector<std::string> notes;
  ctx.log = [&](const std::string& m) { notes.push_back(m); };
  ASSERT_TRUE(run_assign_precision(g, ctx));
  EXPECT_EQ(g.weights().at("q.w").format, ir::WeightFormat::kI8Channel);
  EXPECT_EQ(g.weights().at("q.b").format, ir::WeightFormat::kF32);
  EXPECT_FALSE(notes.empty());

  Graph f8 = decoder_like();
  notes.clear();
  ctx.options.matmul_format = ir::WeightFormat::kF8E4M3;  // K = 4 is not a multiple of 16 either
  ASSERT_TRUE(run_assign_precision(f8, ctx));
  EXPECT_EQ(f8.weights().at("q.w").format, ir::WeightFormat::kI8Channel);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("f8 format's 16"), std::string::npos) << notes[0];
}

TEST(AssignPrecision, AWeightThatFitsKeepsTheGroupFormat) {
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, 64});
  g.inputs() = {x};
  g.outputs() = {g.add_node1("matmul", "proj", {x, g.add_weight("proj.w", counting({8, 64}, 0))})};
  PassContext ctx;
  ctx.options.matmul_format = ir::WeightFormat::kI4Group32;
  ASSERT_TRUE(run_assign_precision(g, ctx));
  EXPECT_EQ(g.weights().at("proj.w").format, ir::WeightFormat::kI4Group32);
}

TEST(AssignPrecision, SimulatedQuantizationKeepsF32WithRoundedValues) {
  Graph g = decoder_like();
  PassContext ctx;
  ctx.options.matmul_format = ir::WeightFormat::kI8Channel;
  ctx.options.simulate_quantization = true;
  ASSERT_TRUE(run_assign_precision(g, ctx));
  const auto& w = g.weights().at("gate.w");
  EXPECT_EQ(w.format, ir::WeightFormat::kF32);
  auto v = w.load();
  ASSERT_TRUE(v);
  // Row 0 is 300..303: scale 303/127, so 300 rounds to 126 * scale.
  EXPECT_FLOAT_EQ((*v)[0], 126.0f * 303.0f / 127.0f);
  // The largest of each row is exact: code 127.
  EXPECT_FLOAT_EQ((*v)[3], 303.0f);
}

// A general graph: x -> MatMul(W [4, 8]) + b [8], a shape constant (i64) and a small f32 vector.
Graph precision_tensor_graph() {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 4});
  const ValueId y = b.node("MatMul", {x, b.g.add_weight("w", counting({4, 8}, 0.5f))});
  const ValueId z = b.node("Add", {y, b.g.add_weight("b", counting({8}, 0))});
  b.output(b.node("Reshape", {b.node("Mul", {z, b.g.add_weight("gain", counting({8}, 1))}),
                              b.g.add_weight("shape", i64_weight({16}))}));
  return std::move(b.g);
}

TEST(AssignPrecision, GeneralGraphsHalveF32WeightsOfSixteenOrMoreElements) {
  for (const auto want : {ir::WeightFormat::kBF16, ir::WeightFormat::kF16}) {
    Graph g = precision_tensor_graph();
    PassContext ctx;
    ctx.options.matmul_format = want;
    ASSERT_TRUE(run_assign_precision(g, ctx));
    EXPECT_EQ(g.weights().at("w").format, want);                       // 32 elements
    EXPECT_EQ(g.weights().at("b").format, ir::WeightFormat::kF32);     // 8: stays exact
    EXPECT_EQ(g.weights().at("gain").format, ir::WeightFormat::kF32);
    EXPECT_EQ(g.weights().at("shape").format, ir::WeightFormat::kF32); // not f32: raw elements
  }
  Graph g = precision_tensor_graph();
  PassContext ctx;
  ctx.options.matmul_format = ir::WeightFormat::kI8Channel;  // refused for general graphs by the caller
  ASSERT_TRUE(run_assign_precision(g, ctx));
  for (const auto& [name, w] : g.weights()) EXPECT_EQ(w.format, ir::WeightFormat::kF32) << name;
}

}  // namespace
}  // namespace kiln::passes
