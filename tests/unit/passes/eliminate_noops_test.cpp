// passes/eliminate_noops.cpp: Identity, and Dropout in inference, hand their input on.
#include <gtest/gtest.h>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(EliminateNoops, AnIdentityBetweenTwoNodesGoes) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 3});
  const ValueId r = b.node("Relu", {x});
  const ValueId id = b.node("Identity", {r});
  const ValueId s = b.node("Sigmoid", {id});
  b.output(s);
  ASSERT_TRUE(run_eliminate_noops(b.g, {}));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  ASSERT_EQ(b.g.nodes().size(), 2u);
  EXPECT_EQ(count_op(b.g, "Identity"), 0u);
  const ir::Node* sigmoid = only_node(b.g, "Sigmoid");
  ASSERT_NE(sigmoid, nullptr);
  EXPECT_EQ(sigmoid->inputs, std::vector<ValueId>{r});
  EXPECT_EQ(b.g.outputs(), std::vector<ValueId>{s});
}

TEST(EliminateNoops, AnInferenceDropoutGoesWithItsUnreadMask) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 3});
  const ValueId r = b.node("Relu", {x});
  // Dropout(data, ratio) -> (output, mask): no training_mode input, the mask read by nothing.
  const auto outs = b.g.add_node("Dropout", "drop", {r, b.scalar(0.1f)}, {}, 2);
  const ValueId t = b.node("Tanh", {outs[0]});
  b.output(t);
  ASSERT_TRUE(run_eliminate_noops(b.g, {}));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  EXPECT_EQ(count_op(b.g, "Dropout"), 0u);
  const ir::Node* tanh = only_node(b.g, "Tanh");
  ASSERT_NE(tanh, nullptr);
  EXPECT_EQ(tanh->inputs, std::vector<ValueId>{r});
}

TEST(EliminateNoops, ADropoutInTrainingModeOrWithItsMaskReadStays) {
  for (const bool training : {true, false}) {
    TensorGraphBuilder b;
    const ValueId x = b.input("x", {2, 3});
    const ValueId mode = b.input("training_mode", {}, DType::kBool);
    std::vector<ValueId> in = {x, b.scalar(0.5f)};
    if (training) in.push_back(mode);
    const auto outs = b.g.add_node("Dropout", "drop", in, {}, 2);
    b.output(outs[0]);
    if (!training) b.output(b.node("Cast", {outs[1]}, {{"to", std::string("f32")}}));  // the mask is read
    const std::string before = snapshot(b.g);
    ASSERT_TRUE(run_eliminate_noops(b.g, {}));
    EXPECT_EQ(snapshot(b.g), before) << (training ? "training_mode" : "mask read");
  }
}

TEST(EliminateNoops, AGraphOutputKeepsItsNameOnTheProducer) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 3});
  const ValueId r = b.node("Relu", {x});
  const ValueId id = b.g.add_node1("Identity", "to_output", {r});
  b.g.value(id).name = "logits";
  b.output(id);
  ASSERT_TRUE(run_eliminate_noops(b.g, {}));
  EXPECT_TRUE(ir::verify(b.g)) << ir::verify(b.g).message();
  ASSERT_EQ(b.g.nodes().size(), 1u);
  EXPECT_EQ(b.g.nodes()[0].op, "Relu");
  ASSERT_EQ(b.g.outputs(), std::vector<ValueId>{r});
  EXPECT_EQ(b.g.value(r).name, "logits") << "callers find the output by its name";
}

TEST(EliminateNoops, AnIdentityFromAGraphInputOrWeightToAnOutputStays) {
  // The output's name cannot move onto a graph input or a weight, which keep their own names.
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 3});
  const ValueId c = b.constant({2}, {1.0f, 2.0f});
  b.output(b.g.add_node1("Identity", "pass_x", {x}));
  b.output(b.g.add_node1("Identity", "pass_c", {c}));
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_eliminate_noops(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
  EXPECT_EQ(count_op(b.g, "Identity"), 2u);
}

TEST(EliminateNoops, AnIdentityBetweenTwoGraphOutputsStays) {
  // Its input is already an output under its own name: the two outputs must stay two values.
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2, 3});
  const ValueId r = b.node("Relu", {x});
  b.output(r);
  b.output(b.g.add_node1("Identity", "copy", {r}));
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_eliminate_noops(b.g, {}));
  EXPECT_EQ(snapshot(b.g), before);
}

}  // namespace
}  // namespace kiln::passes
