#include <gtest/gtest.h>

#include <numeric>

#include "ir/ops.h"
#include "passes/pipeline.h"

namespace kiln::passes {
namespace {

using ir::DType;
using ir::Graph;
using ir::kTokens;
using ir::ValueId;

// A weight whose element i (row-major) is base + i, so concatenations and transposes are checkable.
ir::WeightEntry counting(std::vector<int64_t> shape, float base) {
  ir::WeightEntry w;
  w.shape = shape;
  w.load = [shape, base]() -> Expected<std::vector<float>> {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), base);
    return v;
  };
  return w;
}

class FakeTuner : public KernelTuner {
 public:
  std::string target() const override { return "cpu-test"; }
  std::vector<std::string> matmul_candidates(ir::WeightFormat) const override { return {"slow", "fast"}; }
  double time_matmul(const std::string& kernel, ir::WeightFormat, int64_t, int64_t, int64_t) override {
    ++calls;
    return kernel == "fast" ? 1.0 : 2.0;
  }
  int calls = 0;
};

// x -> q, k, v projections (with bias) -> attention; x -> gate, up -> silu(gate) * up
Graph decoder_like() {
  Graph g;
  ValueId x = g.add_value("x", DType::kF32, {kTokens, 4});
  ValueId pos = g.add_value("positions", DType::kI32, {kTokens});
  g.inputs() = {x, pos};
  auto proj = [&](const std::string& name, int64_t n, float base) {
    ValueId w = g.add_weight(name + ".w", counting({n, 4}, base));
    ValueId b = g.add_weight(name + ".b", counting({n}, base));
    return g.add_node1("matmul", name, {x, w, b});
  };
  ValueId q = proj("q", 4, 0), k = proj("k", 2, 100), v = proj("v", 2, 200);
  ValueId a = g.add_node1("attention", "attn", {q, k, v},
                          {{"layer", int64_t{0}}, {"num_heads", int64_t{2}}, {"num_kv_heads", int64_t{1}},
                           {"head_dim", int64_t{2}}, {"scale", 0.5}});
  ValueId wg = g.add_weight("gate.w", counting({6, 4}, 300));
  ValueId wu = g.add_weight("up.w", counting({6, 4}, 400));
  ValueId gate = g.add_node1("matmul", "gate", {a, wg});
  ValueId up = g.add_node1("matmul", "up", {a, wu});
  ValueId s = g.add_node1("silu", "act", {gate});
  ValueId m = g.add_node1("mul", "gate_mul", {s, up});
  ValueId wt = g.add_weight("out.w", counting({6, 4}, 500));  // stored [in, out], transposed at build
  ValueId t = g.add_node1("transpose", "out.w.T", {wt});
  g.outputs() = {g.add_node1("matmul", "out", {m, t})};
  return g;
}

size_t count_op(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(Passes, FoldConstantsTransposesTheWeight) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fold_constants(g, {}));
  EXPECT_EQ(count_op(g, "transpose"), 0u);
  const auto& w = g.weights().at("out.w.T");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{4, 6}));
  auto v = w.load();
  ASSERT_TRUE(v);
  // element [r, c] of the transpose is element [c, r] = 500 + c*4 + r of the source
  EXPECT_EQ((*v)[1 * 6 + 2], 500.0f + 2 * 4 + 1);
  EXPECT_TRUE(ir::verify(g));
}

TEST(Passes, SiblingMatmulsFuseWithConcatenatedWeightsAndBiases) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fuse_sibling_matmuls(g, {}));
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  EXPECT_EQ(count_op(g, "matmul"), 3u);  // q+k+v, gate+up, out
  EXPECT_EQ(count_op(g, "split"), 2u);
  const ir::Node* qkv = nullptr;
  for (const auto& n : g.nodes()) {
    if (n.op == "matmul" && n.name == "q+k+v") qkv = &n;
  }
  ASSERT_NE(qkv, nullptr);
  auto w = g.weight(qkv->inputs[1]).load();
  auto b = g.weight(qkv->inputs[2]).load();
  ASSERT_TRUE(w && b);
  ASSERT_EQ(w->size(), 8u * 4u);
  EXPECT_EQ((*w)[0], 0.0f);          // q row 0
  EXPECT_EQ((*w)[4 * 4], 100.0f);    // k row 0
  EXPECT_EQ((*w)[6 * 4], 200.0f);    // v row 0
  EXPECT_EQ((*b)[4], 100.0f);
  EXPECT_EQ((*b)[7], 201.0f);
}

TEST(Passes, SwigluFusesIntoSiluMul) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fuse_sibling_matmuls(g, {}));
  ASSERT_TRUE(run_fuse_silu_mul(g, {}));
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  EXPECT_EQ(count_op(g, "silu_mul"), 1u);
  EXPECT_EQ(count_op(g, "silu"), 0u);
  EXPECT_EQ(count_op(g, "mul"), 0u);
  EXPECT_EQ(count_op(g, "split"), 1u);  // only the q/k/v split is left
}

TEST(Passes, SwigluIsLeftAloneWhenTheGateHasAnotherReader) {
  Graph g = decoder_like();
  ASSERT_TRUE(run_fuse_sibling_matmuls(g, {}));
  // A second reader of silu(gate) makes the fusion wrong; the pass must not fire.
  const ValueId s = g.find_value("act");
  ValueId extra = g.add_node1("add", "extra", {s, s});
  g.outputs().push_back(extra);
  ASSERT_TRUE(run_fuse_silu_mul(g, {}));
  EXPECT_EQ(count_op(g, "silu_mul"), 0u);
}

TEST(Passes, DeadNodesAreRemoved) {
  Graph g = decoder_like();
  const ValueId x = g.inputs()[0];
  ValueId w = g.add_weight("unused.w", counting({3, 4}, 0));
  g.add_node1("matmul", "unused", {x, w});
  ASSERT_TRUE(run_eliminate_dead_nodes(g, {}));
  for (const auto& n : g.nodes()) EXPECT_NE(n.name, "unused");
  EXPECT_EQ(g.weights().count("unused.w"), 0u);
}

TEST(Passes, PrecisionFallsBackWhenGroupsDoNotFit) {
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

TEST(Passes, SimulatedQuantizationKeepsF32WithRoundedValues) {
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
}

TEST(Passes, KernelSelectionTakesTheFastestAndCachesShapes) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  EXPECT_FALSE(run_select_kernels(g, ctx));  // the transposed weight is still an op output
  ASSERT_TRUE(run_fold_constants(g, ctx));
  tuner.calls = 0;
  ASSERT_TRUE(run_select_kernels(g, ctx));
  for (const auto& n : g.nodes()) {
    if (n.op != "matmul") continue;
    EXPECT_EQ(n.attr_str("kernel_decode"), "fast");
    EXPECT_EQ(n.attr_str("kernel_prefill"), "fast");
  }
  // gate and up share a shape: 5 matmuls but 4 distinct shapes, each timed for 2 candidates x 2 m.
  EXPECT_EQ(tuner.calls, 4 * 2 * 2);
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

TEST(Passes, KernelSelectionPairsKernelsOfOneResultsClass) {
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

TEST(Passes, KernelSelectionPicksTheFasterLayoutButKeepsLookupTablesInRows) {
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

TEST(Passes, KernelSelectionWithoutTimingTakesThePanelLayout) {
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

TEST(Passes, MemoryPlanNeverOverlapsLiveValues) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  ASSERT_TRUE(run_pipeline(g, ctx, "", {}, {}));
  const auto n = static_cast<int64_t>(g.nodes().size());
  std::vector<int64_t> def(g.values().size(), -1), last(g.values().size(), -1);
  for (int64_t i = 0; i < n; ++i) {
    for (ValueId in : g.nodes()[static_cast<size_t>(i)].inputs) last[static_cast<size_t>(in)] = i;
    for (ValueId out : g.nodes()[static_cast<size_t>(i)].outputs) def[static_cast<size_t>(out)] = i;
  }
  for (ValueId o : g.outputs()) last[static_cast<size_t>(o)] = n;
  std::vector<ValueId> acts;
  for (const auto& v : g.values()) {
    if (!v.is_weight && v.arena_offset >= 0) acts.push_back(v.id);
  }
  ASSERT_GE(acts.size(), 5u);
  for (ValueId a : acts) {
    const auto& va = g.value(a);
    EXPECT_EQ(va.arena_offset % 16, 0);
    const int64_t size_a = va.shape.size() == 2 ? va.shape[1] : 1;
    EXPECT_LE(va.arena_offset + size_a, g.arena_per_token());
    for (ValueId b : acts) {
      if (a >= b) continue;
      const auto& vb = g.value(b);
      const int64_t size_b = vb.shape.size() == 2 ? vb.shape[1] : 1;
      const bool live_together = def[static_cast<size_t>(a)] <= std::max(last[static_cast<size_t>(b)], def[static_cast<size_t>(b)]) &&
                                 def[static_cast<size_t>(b)] <= std::max(last[static_cast<size_t>(a)], def[static_cast<size_t>(a)]);
      const bool overlap = va.arena_offset < vb.arena_offset + size_b && vb.arena_offset < va.arena_offset + size_a;
      EXPECT_FALSE(live_together && overlap) << va.name << " and " << vb.name;
    }
  }
}

TEST(Passes, PipelineRejectsAnUnknownDumpTarget) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  Status st = run_pipeline(g, ctx, "fuse_everything", {}, {});
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("fuse_sibling_matmuls"), std::string::npos) << st.message();
}

TEST(Passes, PipelineDumpsAfterTheNamedPass) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  std::string dumped;
  ASSERT_TRUE(run_pipeline(g, ctx, "fuse_silu_mul", [&](const std::string& s) { dumped += s; }, {}));
  EXPECT_NE(dumped.find("after fuse_silu_mul"), std::string::npos);
  EXPECT_NE(dumped.find("silu_mul("), std::string::npos);
}

}  // namespace
}  // namespace kiln::passes
