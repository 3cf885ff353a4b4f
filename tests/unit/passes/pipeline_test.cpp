// passes/pipeline.cpp: the passes as one named list, run in order, each followed by ir::verify.
#include <gtest/gtest.h>

#include "passes/pipeline.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(Pipeline, RunsTheNamedPassesInOrderAndRecordsThem) {
  const std::vector<std::string> want = {
      "eliminate_noops",   "fold_constants",       "fuse_conv_batchnorm",  "fuse_subgraphs",
      "fuse_epilogues",    "fuse_attention",       "transpose_matmul_weights", "eliminate_dead_nodes",
      "fuse_sibling_matmuls", "fuse_silu_mul",     "quantize_int8",        "pack_matmul_weights",
      "assign_precision",  "select_kernels",       "plan_memory"};
  ASSERT_EQ(default_pipeline().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(default_pipeline()[i].name, want[i]);

  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  std::vector<std::string> seen;
  std::vector<PassRecord> records;
  ASSERT_TRUE(run_pipeline(g, ctx, "", {}, [&](size_t i, size_t n, const std::string& name) {
    EXPECT_EQ(i, seen.size());
    EXPECT_EQ(n, want.size());
    seen.push_back(name);
  }, &records));
  EXPECT_EQ(seen, want);
  ASSERT_EQ(records.size(), want.size());
  // decoder_like has 10 nodes; fold_constants removes the transpose (9); fuse_sibling_matmuls
  // makes q, k, v one matmul and a split, and gate, up likewise (8); fuse_silu_mul removes the
  // gate/up split and the silu, the mul becoming silu_mul (6).
  EXPECT_EQ(records[0].nodes_before, 10u);
  EXPECT_EQ(records[1].nodes_after, 9u);
  EXPECT_EQ(records[8].nodes_after, 8u);
  EXPECT_EQ(records[9].nodes_after, 6u);
  EXPECT_EQ(records.back().nodes_after, g.nodes().size());
}

TEST(Pipeline, MemoryPlanNeverOverlapsLiveValues) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  ASSERT_TRUE(run_pipeline(g, ctx, "", {}, {}));
  size_t planned = 0;
  for (const auto& v : g.values()) planned += !v.is_weight && v.arena_offset >= 0;
  ASSERT_GE(planned, 5u);
  expect_plan_never_overlaps(g);
}

TEST(Pipeline, RejectsAnUnknownDumpTarget) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  Status st = run_pipeline(g, ctx, "fuse_everything", {}, {});
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("fuse_sibling_matmuls"), std::string::npos) << st.message();
}

TEST(Pipeline, DumpsAfterTheNamedPass) {
  Graph g = decoder_like();
  FakeTuner tuner;
  PassContext ctx;
  ctx.tuner = &tuner;
  std::string dumped;
  ASSERT_TRUE(run_pipeline(g, ctx, "fuse_silu_mul", [&](const std::string& s) { dumped += s; }, {}));
  EXPECT_NE(dumped.find("after fuse_silu_mul"), std::string::npos);
  EXPECT_NE(dumped.find("silu_mul("), std::string::npos);
}

TEST(Pipeline, AFailingPassIsNamed) {
  Graph g = decoder_like();
  PassContext ctx;  // no tuner: select_kernels refuses
  const Status st = run_pipeline(g, ctx, "", {}, {});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.message().rfind("pass select_kernels: ", 0), 0u) << st.message();
}

}  // namespace
}  // namespace kiln::passes
