// passes/select_kernels.cpp: each matmul's decode and prefill kernels (and its weight's layout)
// chosen by timing candidates with the target's KernelTuner. The tuners here return fixed
// timings: the test is of the choice, not of any kernel.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(SelectKernels, TakesTheFastestAndCachesShapes) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  ASSERT_TRUE(run_fold_constants(g, ctx));
  ASSERT_TRUE(run_select_kernels(g, ctx));
  for (const auto& n : g.nodes()) {
    if (n.op != "matmul") continue;
    EXPECT_EQ(n.attr_str("kernel_decode"), "fast");
    EXPECT_EQ(n.attr_str("kernel_prefill"), "fast");
    EXPECT_DOUBLE_EQ(n.attr_float("kernel_decode_us"), 1e6) << "the fake's 1 s, in microseconds";
    EXPECT_DOUBLE_EQ(n.attr_float("kernel_prefill_us"), 1e6);
  }
  // gate and up share a shape: 5 matmuls but 4 distinct shapes, each timed for 2 candidates x 2 m.
  EXPECT_EQ(tuner.calls, 4 * 2 * 2);
}

TEST(SelectKernels, RefusesAProductOfTwoActivationsAndAMissingTarget) {
  Graph g = decoder_like();  // the output projection's weight is still a transpose's output
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  const Status s = run_select_kernels(g, ctx);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("'out'"), std::string::npos) << s.message();
  EXPECT_EQ(run_select_kernels(g, {}).code(), StatusCode::kInternal) << "no tuner";
}

// Three kernels: "float" multiplies floats, "bf16" and "bf16.prefill" round the activations to
// bf16; "float" is the fastest at m = 1 and "bf16.prefill" at the prefill shape.
class RoundingTuner : public KernelTuner {
 public:
  std::string target() const override { return "cpu-test"; }
  std::vector<std::string> matmul_candidates(ir::WeightFormat) const override {
    return {"float", "bf16", "bf16.prefill"};
  }
  std::string matmul_results_class(const std::string& kernel) const override {
    return kernel == "float" ? "" : "bf16";
  }
  double time_matmul(const std::string& kernel, ir::WeightFormat, int64_t m, int64_t, int64_t) override {
    if (m == 1) return kernel == "float" ? 1.0 : kernel == "bf16" ? decode_bf16 : 3.0;
    return kernel == "bf16.prefill" ? 10.0 : kernel == "bf16" ? 60.0 : prefill_float;
  }
  double decode_bf16 = 1.1, prefill_float = 40.0;
};

TEST(SelectKernels, PairsKernelsOfOneResultsClass) {
  // Per prefill row: float 1 + 40/m against bf16 1.1 + 10/m; both m = 128 and the tiny test
  // graph's max_batch_tokens make bf16 win, though "float" alone is the fastest decode kernel.
  for (const bool float_wins : {false, true}) {
    Graph g = decoder_like();
    RoundingTuner tuner;
    if (float_wins) {
      tuner.decode_bf16 = 5.0;
      tuner.prefill_float = 11.0;
    }
    PassContext ctx;
    ctx.tuner = &tuner;
    ASSERT_TRUE(run_fold_constants(g, ctx));
    ASSERT_TRUE(run_select_kernels(g, ctx));
    for (const auto& n : g.nodes()) {
      if (n.op != "matmul") continue;
      EXPECT_EQ(n.attr_str("kernel_decode"), float_wins ? "float" : "bf16") << n.name;
      EXPECT_EQ(n.attr_str("kernel_prefill"), float_wins ? "float" : "bf16.prefill") << n.name;
    }
  }
}

// Times "a" at 3 s, 1 s, 2 s in its three rounds and "b" at 1.5 s always: "a" wins on its best round.
class NoisyTuner : public KernelTuner {
 public:
  std::string target() const override { return "cpu-test"; }
  std::vector<std::string> matmul_candidates(ir::WeightFormat) const override { return {"b", "a"}; }
  int timing_rounds() const override { return 3; }
  double time_matmul(const std::string& kernel, ir::WeightFormat, int64_t m, int64_t, int64_t) override {
    if (kernel == "b") return 1.5;
    const int round = m == 1 ? decode_round++ : prefill_round++;
    return round % 3 == 0 ? 3.0 : round % 3 == 1 ? 1.0 : 2.0;
  }
  int decode_round = 0, prefill_round = 0;
};

TEST(SelectKernels, KeepsEachCandidatesFastestRound) {
  Graph g;
  const ValueId x = g.add_value("x", DType::kF32, {kTokens, 4});
  g.inputs() = {x};
  g.outputs() = {g.add_node1("matmul", "proj", {x, g.add_weight("proj.w", counting({3, 4}, 0))})};
  NoisyTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  ASSERT_TRUE(run_select_kernels(g, ctx));
  EXPECT_EQ(tuner.decode_round, 3);
  EXPECT_EQ(tuner.prefill_round, 3);
  const ir::Node& n = g.nodes()[0];
  EXPECT_EQ(n.attr_str("kernel_decode"), "a");
  EXPECT_EQ(n.attr_str("kernel_prefill"), "a");
  EXPECT_DOUBLE_EQ(n.attr_float("kernel_decode_us"), 1e6);
}

TEST(SelectKernels, WithoutTimingTakesTheFirstCandidate) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  ctx.options.autotune = false;
  ASSERT_TRUE(run_fold_constants(g, ctx));
  ASSERT_TRUE(run_select_kernels(g, ctx));
  EXPECT_EQ(tuner.calls, 0);
  for (const auto& n : g.nodes()) {
    if (n.op != "matmul") continue;
    EXPECT_EQ(n.attr_str("kernel_decode"), "slow");
    EXPECT_FALSE(n.has_attr("kernel_decode_us")) << "nothing was measured";
  }
}

// A tuner whose kernels for `fast_format` are faster than any other format's.
class LayoutTuner : public KernelTuner {
 public:
  explicit LayoutTuner(ir::WeightFormat fast_format) : fast_(fast_format) {}
  std::string target() const override { return "cpu-test"; }
  std::vector<std::string> matmul_candidates(ir::WeightFormat f) const override {
    return {std::string(ir::weight_format_name(f)) + ".kernel"};
  }
  double time_matmul(const std::string&, ir::WeightFormat f, int64_t, int64_t, int64_t) override {
    ++calls;
    return f == fast_ ? 1.0 : 2.0;
  }
  int calls = 0;

 private:
  ir::WeightFormat fast_;
};

// Matmul weights [16, 64] (panel-compatible) and an embedding table that must keep its rows.
Graph panel_candidate_graph() {
  Graph g;
  ValueId ids = g.add_value("ids", DType::kI32, {kTokens});
  ValueId pos = g.add_value("positions", DType::kI32, {kTokens});
  g.inputs() = {ids, pos};
  ValueId table = g.add_weight("embed", counting({16, 64}, 0));
  ValueId h = g.add_node1("embedding", "embed", {ids, table});
  ValueId w1 = g.add_weight("proj.w", counting({64, 64}, 1));
  ValueId h1 = g.add_node1("matmul", "proj", {h, w1});
  ValueId head = g.add_node1("matmul", "head", {h1, table});  // tied: the table is also a matmul weight
  g.outputs() = {head};
  return g;
}

TEST(SelectKernels, PicksTheFasterLayoutButKeepsLookupTablesInRows) {
  for (bool panel_faster : {true, false}) {
    Graph g = panel_candidate_graph();
    PassContext ctx;
    ctx.options.matmul_format = ir::WeightFormat::kI4Group32;
    LayoutTuner tuner(panel_faster ? ir::WeightFormat::kI4Group32Panel8 : ir::WeightFormat::kI4Group32);
    ctx.tuner = &tuner;
    ASSERT_TRUE(run_assign_precision(g, ctx));
    ASSERT_TRUE(run_select_kernels(g, ctx));
    const ir::WeightFormat want = panel_faster ? ir::WeightFormat::kI4Group32Panel8 : ir::WeightFormat::kI4Group32;
    EXPECT_EQ(g.weights().at("proj.w").format, want);
    EXPECT_EQ(g.weights().at("embed").format, ir::WeightFormat::kI4Group32) << "an embedding reads rows";
    for (const auto& n : g.nodes()) {
      if (n.name == "proj") {
        EXPECT_EQ(n.attr_str("kernel_decode"), std::string(ir::weight_format_name(want)) + ".kernel");
      }
      if (n.name == "head") {
        EXPECT_EQ(n.attr_str("kernel_prefill"), "i4g32.kernel");
      }
    }
  }
}

TEST(SelectKernels, WithoutTimingTakesThePanelLayout) {
  Graph g = panel_candidate_graph();
  PassContext ctx;
  ctx.options.matmul_format = ir::WeightFormat::kBF16;
  ctx.options.autotune = false;
  LayoutTuner tuner(ir::WeightFormat::kBF16);
  ctx.tuner = &tuner;
  ASSERT_TRUE(run_assign_precision(g, ctx));
  ASSERT_TRUE(run_select_kernels(g, ctx));
  EXPECT_EQ(g.weights().at("proj.w").format, ir::WeightFormat::kBF16Panel8);
  EXPECT_EQ(g.weights().at("embed").format, ir::WeightFormat::kBF16);
  EXPECT_EQ(tuner.calls, 0);
}

}  // namespace
}  // namespace kiln::passes
