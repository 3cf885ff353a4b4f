// passes/graph_edit.cpp: erase_nodes, single_reader, weight_tensor (pass.h), and ir::weight_entry_from_tensor, which it reverses.
#include <gtest/gtest.h>

#include <cstring>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

TEST(GraphEdit, EraseNodesKeepsTheOrderOfTheRest) {
  TensorGraphBuilder b;
  ValueId v = b.input("x", {2});
  for (int i = 0; i < 5; ++i) v = b.node("Relu", {v});
  std::vector<std::string> names;
  for (const auto& n : b.g.nodes()) names.push_back(n.name);
  erase_nodes(b.g, {true, false, true, false, false});
  ASSERT_EQ(b.g.nodes().size(), 3u);
  EXPECT_EQ(b.g.nodes()[0].name, names[1]);
  EXPECT_EQ(b.g.nodes()[1].name, names[3]);
  EXPECT_EQ(b.g.nodes()[2].name, names[4]);
}

TEST(GraphEdit, SingleReaderMeansOneNodeAndNotAGraphOutput) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {2});
  const ValueId unread = b.input("unread", {2});
  const ValueId r = b.node("Relu", {x});
  const ValueId s = b.node("Add", {r, r});  // one node reading r twice
  b.node("Neg", {s});
  b.node("Abs", {s});
  const ValueId out = b.node("Exp", {x});
  b.output(out);
  EXPECT_TRUE(single_reader(b.g, r));
  EXPECT_FALSE(single_reader(b.g, s));
  EXPECT_FALSE(single_reader(b.g, x));  // Relu and Exp
  EXPECT_FALSE(single_reader(b.g, unread));
  EXPECT_FALSE(single_reader(b.g, out));
}

TEST(GraphEdit, WeightTensorAndWeightEntryFromTensorRoundTrip) {
  ir::Tensor f(DType::kF32, {2, 3});
  for (int64_t i = 0; i < 6; ++i) f.mutable_data<float>()[i] = 0.5f * static_cast<float>(i) - 1.0f;
  ir::Tensor n(DType::kI32, {4});
  for (int64_t i = 0; i < 4; ++i) n.mutable_data<int32_t>()[i] = static_cast<int32_t>(i * i) - 3;

  for (const ir::Tensor& t : {f, n}) {
    const ir::WeightEntry e = ir::weight_entry_from_tensor(t);
    EXPECT_EQ(e.shape, t.shape());
    EXPECT_EQ(e.dtype, t.dtype());
    EXPECT_EQ(static_cast<bool>(e.load), t.dtype() == DType::kF32) << "f32 loads floats, others bytes";
    EXPECT_EQ(static_cast<bool>(e.load_bytes), t.dtype() != DType::kF32);
    auto back = weight_tensor(e);
    ASSERT_TRUE(back) << back.status().message();
    EXPECT_EQ(back->dtype(), t.dtype());
    EXPECT_EQ(back->shape(), t.shape());
    ASSERT_EQ(back->byte_size(), t.byte_size());
    EXPECT_EQ(std::memcmp(back->bytes(), t.bytes(), t.byte_size()), 0);
  }
}

TEST(GraphEdit, WeightTensorRefusesALoaderOfTheWrongSize) {
  const auto f = weight_tensor(f32_weight({2, 2}, {1, 2, 3}));
  ASSERT_FALSE(f);
  EXPECT_EQ(f.status().code(), StatusCode::kInternal);
  ir::WeightEntry ids = i64_weight({1, 2, 3});
  ids.shape = {4};
  EXPECT_EQ(weight_tensor(ids).status().code(), StatusCode::kInternal);
  ir::WeightEntry failing = f32_weight({1}, {1});
  failing.load = []() -> Expected<std::vector<float>> { return io_error("checkpoint truncated"); };
  const auto e = weight_tensor(failing);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().message(), "checkpoint truncated") << "the loader's error passes through";
}

}  // namespace
}  // namespace kiln::passes
