// The ONNX reader: models built in code as an exporter writes them, and broken ones.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "formats/onnx/onnx_model.h"
#include "formats/onnx/onnx_tensor.h"
#include "ir/ops.h"
#include "support/onnx_test_models.h"

namespace kiln::formats {
namespace {

namespace fs = std::filesystem;
using kiln::testing::onnx_attr_int;
using kiln::testing::onnx_float_initializer;
using kiln::testing::onnx_model;
using kiln::testing::onnx_node;
using kiln::testing::onnx_value;

class OnnxModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_onnx_model_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// y = Relu(MatMul(x [batch, 3], w [3, 2]) + b)
onnx::ModelProto dense_model() {
  onnx::ModelProto m = onnx_model();
  auto* g = m.mutable_graph();
  *g->add_input() = onnx_value("x", onnx::TensorProto::FLOAT, {"batch", "3"});
  *g->add_output() = onnx_value("y", onnx::TensorProto::FLOAT, {"batch", "2"});
  onnx_float_initializer(g, "w", {3, 2}, {1, 2, 3, 4, 5, 6});
  onnx_float_initializer(g, "b", {2}, {0.5f, -100});
  onnx_node(g, "MatMul", {"x", "w"}, {"xw"}, "dense");
  onnx_node(g, "Add", {"xw", "b"}, {"z"}, "bias");
  onnx_node(g, "Relu", {"z"}, {"y"}, "act");
  return m;
}

TEST_F(OnnxModelTest, ImportsNodesInitializersAndSymbolicDims) {
  kiln::testing::onnx_save(dense_model(), path("m.onnx"));
  auto imported = onnx_import_file(path("m.onnx"));
  ASSERT_TRUE(imported) << imported.status().message();
  EXPECT_TRUE(imported->unsupported.empty());
  const ir::Graph& g = imported->graph;
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes()[0].op, "MatMul");
  ASSERT_EQ(g.inputs().size(), 1u);
  const ir::Value& x = g.value(g.inputs()[0]);
  ASSERT_EQ(x.shape.size(), 2u);
  EXPECT_EQ(g.dim_str(x.shape[0]), "batch");
  EXPECT_EQ(x.shape[1], 3);
  EXPECT_EQ(g.weights().at("w").shape, (std::vector<int64_t>{3, 2}));
  auto w = g.weights().at("w").load();
  ASSERT_TRUE(w);
  EXPECT_EQ((*w)[5], 6.0f);
  EXPECT_TRUE(ir::verify(g).is_ok());
}

TEST_F(OnnxModelTest, TruncatedFileIsOneLineError) {
  std::string bytes;
  dense_model().SerializeToString(&bytes);
  std::ofstream(path("cut.onnx"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  auto imported = onnx_import_file(path("cut.onnx"));
  ASSERT_FALSE(imported);
  EXPECT_NE(imported.status().message().find("not a valid ONNX model"), std::string::npos);
  EXPECT_EQ(imported.status().message().find('\n'), std::string::npos);
}

TEST_F(OnnxModelTest, MissingFileAndTooNewIrVersionAreErrors) {
  EXPECT_FALSE(onnx_import_file(path("absent.onnx")));
  onnx::ModelProto m = dense_model();
  m.set_ir_version(11);
  kiln::testing::onnx_save(m, path("new.onnx"));
  auto imported = onnx_import_file(path("new.onnx"));
  ASSERT_FALSE(imported);
  EXPECT_NE(imported.status().message().find("IR version 11"), std::string::npos);
}

TEST_F(OnnxModelTest, UnknownOpsAreListedWithNodeAndReason) {
  onnx::ModelProto m = dense_model();
  auto* g = m.mutable_graph();
  g->mutable_output(0)->set_name("q");
  onnx_node(g, "FancyOp", {"y"}, {"p"}, "fancy");
  auto* n = onnx_node(g, "Softmax", {"p"}, {"q"}, "soft");
  (void)n;
  auto* custom = onnx_node(g, "Thing", {"y"}, {"r"}, "custom");
  custom->set_domain("com.example");
  kiln::testing::onnx_save(m, path("m.onnx"));
  auto imported = onnx_import_file(path("m.onnx"));
  ASSERT_TRUE(imported) << imported.status().message();
  ASSERT_EQ(imported->unsupported.size(), 2u);
  EXPECT_EQ(imported->unsupported[0].line(), "node 'fancy' (FancyOp, ai.onnx opset 13): unsupported op");
  EXPECT_EQ(imported->unsupported[1].domain, "com.example");
  auto graph = onnx_import_require_supported(std::move(*imported));
  ASSERT_FALSE(graph);
  EXPECT_NE(graph.status().message().find("node 'fancy'"), std::string::npos);
  EXPECT_NE(graph.status().message().find("1 more"), std::string::npos);
}

TEST_F(OnnxModelTest, OutOfRangeAttributeNamesTheNode) {
  onnx::ModelProto m = onnx_model();
  auto* g = m.mutable_graph();
  *g->add_input() = onnx_value("a", onnx::TensorProto::FLOAT, {"2", "3"});
  *g->add_input() = onnx_value("b", onnx::TensorProto::FLOAT, {"3", "2"});
  *g->add_output() = onnx_value("c", onnx::TensorProto::FLOAT, {"2", "2"});
  onnx_attr_int(onnx_node(g, "Gemm", {"a", "b"}, {"c"}, "proj"), "transA", 7);
  kiln::testing::onnx_save(m, path("m.onnx"));
  auto imported = onnx_import_file(path("m.onnx"));
  ASSERT_TRUE(imported);
  ASSERT_EQ(imported->unsupported.size(), 1u);
  EXPECT_EQ(imported->unsupported[0].node, "proj");
  EXPECT_NE(imported->unsupported[0].reason.find("'transA' = 7 is out of range"), std::string::npos);
}

TEST_F(OnnxModelTest, HugeDimsAreRefusedBeforeAnythingIsAllocated) {
  onnx::ModelProto m = dense_model();
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_dims();
  for (int i = 0; i < 3; ++i) w->add_dims(int64_t{1} << 30);
  kiln::testing::onnx_save(m, path("m.onnx"));
  auto imported = onnx_import_file(path("m.onnx"));
  ASSERT_FALSE(imported);
  EXPECT_NE(imported.status().message().find("more than 2^40 elements"), std::string::npos)
      << imported.status().message();
}

TEST_F(OnnxModelTest, MalformedNodesAreListedNotFatal) {
  onnx::ModelProto m = onnx_model();
  auto* g = m.mutable_graph();
  *g->add_input() = onnx_value("x", onnx::TensorProto::FLOAT, {"1", "1", "4", "4"});
  *g->add_output() = onnx_value("y", onnx::TensorProto::FLOAT, {"1", "1", "2", "2"});
  auto* pool = onnx_node(g, "MaxPool", {"x"}, {"y"}, "pool");
  auto* pads = pool->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::FLOAT);
  pads->set_f(1.0f);
  onnx_node(g, "Constant", {}, {}, "no_output");
  onnx_node(g, "Relu", {""}, {"r"}, "no_input");
  kiln::testing::onnx_save(m, path("m.onnx"));
  auto imported = onnx_import_file(path("m.onnx"));
  ASSERT_TRUE(imported) << imported.status().message();
  ASSERT_EQ(imported->unsupported.size(), 3u);
  EXPECT_EQ(imported->unsupported[0].line(), "node 'pool' (MaxPool, ai.onnx opset 13): attribute 'pads' must be a list of ints");
  EXPECT_EQ(imported->unsupported[1].reason, "the node has no output");
  EXPECT_EQ(imported->unsupported[2].reason, "the node's first input is missing");
}

TEST_F(OnnxModelTest, ExternalDataIsReadBesideTheModelAndConfinedToIt) {
  onnx::ModelProto m = dense_model();
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  auto* off = w->add_external_data();
  off->set_key("offset");
  off->set_value("4");
  const float values[7] = {99, 1, 2, 3, 4, 5, 6};
  std::ofstream(path("weights.bin"), std::ios::binary).write(reinterpret_cast<const char*>(values), sizeof(values));
  kiln::testing::onnx_save(m, path("m.onnx"));
  auto imported = onnx_import_file(path("m.onnx"));
  ASSERT_TRUE(imported) << imported.status().message();
  auto loaded = imported->graph.weights().at("w").load();
  ASSERT_TRUE(loaded);
  EXPECT_EQ((*loaded)[0], 1.0f);
  EXPECT_EQ((*loaded)[5], 6.0f);

  loc->set_value("../weights.bin");
  kiln::testing::onnx_save(m, path("escape.onnx"));
  auto escaped = onnx_import_file(path("escape.onnx"));
  ASSERT_FALSE(escaped);
  EXPECT_NE(escaped.status().message().find("inside the model's directory"), std::string::npos);
}

TEST_F(OnnxModelTest, OldOpsetFormsBecomeTheLatestForm) {
  onnx::ModelProto m = onnx_model(11);
  auto* g = m.mutable_graph();
  *g->add_input() = onnx_value("x", onnx::TensorProto::FLOAT, {"1", "4"});
  *g->add_output() = onnx_value("y", onnx::TensorProto::FLOAT, {"4"});
  auto* sq = onnx_node(g, "Squeeze", {"x"}, {"y"}, "sq");
  auto* axes = sq->add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(0);
  kiln::testing::onnx_save(m, path("m.onnx"));
  auto imported = onnx_import_file(path("m.onnx"));
  ASSERT_TRUE(imported);
  const ir::Node& node = imported->graph.nodes().at(0);
  ASSERT_EQ(node.inputs.size(), 2u);  // axes moved from the attribute to a constant input
  EXPECT_TRUE(imported->graph.value(node.inputs[1]).is_weight);
  EXPECT_EQ(imported->graph.value(node.inputs[1]).dtype, ir::DType::kI64);
}

}  // namespace
}  // namespace kiln::formats
