// passes/fuse_attention.cpp: MatMul [* scale] [+ mask] -> Softmax [-> Cast f32] -> MatMul becomes
// one kiln.Attention node, and the head-splitting Transposes around it go too.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

struct AttentionGraph {
  TensorGraphBuilder b;
  ValueId q, kt, v, mask = ir::kNoValue, scores, probs, out;
};

struct AttentionSpelling {
  bool mask = true;
  bool mask_first = false;  // Add(mask, s) instead of Add(s, mask)
  bool cast = false;
  std::string cast_to = "f32";
  int64_t softmax_axis = -1;
  DType mask_dtype = DType::kF32;
};

// q [1, 2, 4, 8], kt [1, 2, 8, 4], v [1, 2, 4, 8]; the scores' MatMul carries the scale 1/sqrt(8)
// in its epilogue, as fuse_epilogues leaves a Div by sqrt(8).
AttentionGraph attention_graph(const AttentionSpelling& sp = {}) {
  AttentionGraph a;
  TensorGraphBuilder& b = a.b;
  a.q = b.input("q", {1, 2, 4, 8});
  a.kt = b.input("kt", {1, 2, 8, 4});
  a.v = b.input("v", {1, 2, 4, 8});
  a.scores = b.node("MatMul", {a.q, a.kt}, {{"kiln.scale", 0.35355339059327373}});
  ValueId s = a.scores;
  if (sp.mask) {
    a.mask = b.input("mask", {1, 1, 4, 4}, sp.mask_dtype);
    s = sp.mask_first ? b.node("Add", {a.mask, s}) : b.node("Add", {s, a.mask});
  }
  a.probs = b.node("Softmax", {s}, {{"axis", sp.softmax_axis}});
  ValueId p = a.probs;
  if (sp.cast) p = b.node("Cast", {p}, {{"to", sp.cast_to}});
  a.out = b.node("MatMul", {p, a.v});
  b.output(a.out);
  return a;
}

void expect_attention(const AttentionGraph& a, const std::vector<ValueId>& inputs) {
  const Graph& g = a.b.g;
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  ASSERT_EQ(g.nodes().size(), 1u) << ir::print_graph(g);
  const ir::Node& n = g.nodes()[0];
  EXPECT_EQ(n.op, "kiln.Attention");
  EXPECT_EQ(n.inputs, inputs);
  EXPECT_EQ(n.outputs, std::vector<ValueId>{a.out});
  EXPECT_DOUBLE_EQ(n.attr_float("scale"), 0.35355339059327373);
  EXPECT_FALSE(n.has_attr("kiln.scale")) << "the MatMul's epilogue does not carry over";
  EXPECT_FALSE(n.has_attr("kiln.layout"));
}

TEST(FuseAttention, MaskedScaledAttentionBecomesOneNode) {
  for (const bool mask_first : {false, true}) {
    AttentionSpelling sp;
    sp.mask_first = mask_first;
    AttentionGraph a = attention_graph(sp);
    std::vector<std::string> notes;
    PassContext ctx;
    ctx.log = [&](const std::string& m) { notes.push_back(m); };
    ASSERT_TRUE(run_fuse_attention(a.b.g, ctx));
    expect_attention(a, {a.q, a.kt, a.v, a.mask});
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("1 MatMul-Softmax-MatMul"), std::string::npos) << notes[0];
  }
}

TEST(FuseAttention, WithoutAMaskAndThroughACastToF32) {
  AttentionSpelling sp;
  sp.mask = false;
  sp.cast = true;
  AttentionGraph a = attention_graph(sp);
  ASSERT_TRUE(run_fuse_attention(a.b.g, {}));
  expect_attention(a, {a.q, a.kt, a.v});
}

TEST(FuseAttention, TheHeadTransposesAroundItGoToo) {
  TensorGraphBuilder b;
  const ValueId qs = b.input("q_bshd", {1, 4, 2, 8});
  const ValueId ks = b.input("k_bshd", {1, 4, 2, 8});
  const ValueId vs = b.input("v_bshd", {1, 4, 2, 8});
  const std::vector<int64_t> heads = {0, 2, 1, 3}, keys = {0, 2, 3, 1};
  const ValueId q = b.node("Transpose", {qs}, {{"perm", heads}});
  const ValueId kt = b.node("Transpose", {ks}, {{"perm", keys}});
  const ValueId v = b.node("Transpose", {vs}, {{"perm", heads}});
  const ValueId p = b.node("Softmax", {b.node("MatMul", {q, kt}, {{"kiln.scale", 0.5}})});
  const ValueId out = b.node("Transpose", {b.node("MatMul", {p, v})}, {{"perm", heads}});
  b.output(out);
  std::vector<std::string> notes;
  PassContext ctx;
  ctx.log = [&](const std::string& m) { notes.push_back(m); };
  ASSERT_TRUE(run_fuse_attention(b.g, ctx));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  ASSERT_EQ(b.g.nodes().size(), 1u) << ir::print_graph(b.g);
  const ir::Node& n = b.g.nodes()[0];
  EXPECT_EQ(n.op, "kiln.Attention");
  EXPECT_EQ(n.inputs, (std::vector<ValueId>{qs, ks, vs}));
  EXPECT_EQ(n.outputs, std::vector<ValueId>{out});
  EXPECT_EQ(n.attr_str("kiln.layout"), "bshd");
  EXPECT_DOUBLE_EQ(n.attr_float("scale"), 0.5);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("4 Transposes removed"), std::string::npos) << notes[1];
}

TEST(FuseAttention, TheTransposesStayWhenTheOutputIsNotTransposedBack) {
  TensorGraphBuilder b;
  const std::vector<int64_t> heads = {0, 2, 1, 3}, keys = {0, 2, 3, 1};
  const ValueId q = b.node("Transpose", {b.input("q_bshd", {1, 4, 2, 8})}, {{"perm", heads}});
  const ValueId kt = b.node("Transpose", {b.input("k_bshd", {1, 4, 2, 8})}, {{"perm", keys}});
  const ValueId v = b.node("Transpose", {b.input("v_bshd", {1, 4, 2, 8})}, {{"perm", heads}});
  const ValueId p = b.node("Softmax", {b.node("MatMul", {q, kt})});
  const ValueId out = b.node("MatMul", {p, v});
  b.output(out);
  ASSERT_TRUE(run_fuse_attention(b.g, {}));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  EXPECT_EQ(count_op(b.g, "Transpose"), 3u);
  const ir::Node* n = only_node(b.g, "kiln.Attention");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->inputs, (std::vector<ValueId>{q, kt, v}));
  EXPECT_FALSE(n->has_attr("kiln.layout"));
  EXPECT_DOUBLE_EQ(n->attr_float("scale"), 1.0) << "no epilogue: scale 1";
}

TEST(FuseAttention, LeavesChainsItCannotTake) {
  const auto expect_unchanged = [](AttentionGraph a, const std::string& why) {
    const std::string before = snapshot(a.b.g);
    ASSERT_TRUE(run_fuse_attention(a.b.g, {}));
    EXPECT_EQ(snapshot(a.b.g), before) << why;
  };
  {
    AttentionGraph a = attention_graph();
    a.b.output(a.probs);
    expect_unchanged(std::move(a), "the probabilities are read elsewhere");
  }
  {
    AttentionSpelling sp;
    sp.softmax_axis = 1;
    expect_unchanged(attention_graph(sp), "softmax over another axis");
  }
  {
    AttentionSpelling sp;
    sp.mask_dtype = DType::kBool;
    expect_unchanged(attention_graph(sp), "a boolean mask is not additive");
  }
  {
    AttentionSpelling sp;
    sp.cast = true;
    sp.cast_to = "f16";
    expect_unchanged(attention_graph(sp), "probabilities cast to f16");
  }
  {
    AttentionGraph a = attention_graph();
    a.b.g.nodes()[0].attrs["kiln.activation"] = std::string("Relu");
    expect_unchanged(std::move(a), "the scores' MatMul carries an activation");
  }
  {
    AttentionGraph a = attention_graph();
    a.b.g.nodes().back().attrs["kiln.scale"] = 2.0;
    expect_unchanged(std::move(a), "the output MatMul carries a scale");
  }
}

}  // namespace
}  // namespace kiln::passes
