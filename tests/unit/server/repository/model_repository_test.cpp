// A model repository on disk: an ONNX model written here with a dynamic batch axis, the real
// test_add model of Debian's libonnx-testdata, and directories that must fail to load, each
// with its reason, while the others serve.
#include "server/repository/model_repository.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "onnx/onnx.pb.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const char* kTestAdd = "/usr/share/libonnx-testdata/data/node/test_add/model.onnx";

// y = x + [1, 2, 3, 4]: x [batch, 4] f32 -> y [batch, 4].
void write_plus_model(const fs::path& file) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("plus");
  auto add_io = [](onnx::ValueInfoProto* v, const char* name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_value(4);
  };
  add_io(g->add_input(), "x");
  add_io(g->add_output(), "y");
  onnx::TensorProto* c = g->add_initializer();
  c->set_name("c");
  c->set_data_type(onnx::TensorProto::FLOAT);
  c->add_dims(4);
  for (float f : {1.0f, 2.0f, 3.0f, 4.0f}) c->add_float_data(f);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("c");
  n->add_output("y");
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary);
  ASSERT_TRUE(m.SerializeToOstream(&out));
}

void write_text(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

class ModelRepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kTestAdd)) GTEST_SKIP() << kTestAdd << " is missing; scripts/setup.sh installs libonnx-testdata";
    root_ = fs::temp_directory_path() / ("kiln_repository_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    write_plus_model(root_ / "repo/plus/1/model.onnx");
    write_plus_model(root_ / "repo/plus/2/model.onnx");
    write_text(root_ / "repo/plus/config.pbtxt", R"(
      name: "plus" platform: "onnxruntime_onnx" max_batch_size: 8
      input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
      dynamic_batching { max_queue_delay_microseconds: 100000 }
    )");
    fs::create_directories(root_ / "repo/add/7");
    fs::copy_file(kTestAdd, root_ / "repo/add/7/model.onnx");  // no config.pbtxt: served as declared
    write_text(root_ / "repo/typo/config.pbtxt", "max_batch_size: 2 input [ { name: \"x\" data_type: TYPE_FP33 dims: [ 4 ] } ]");
    write_plus_model(root_ / "repo/typo/1/model.onnx");
    write_text(root_ / "repo/wrong/config.pbtxt", "max_batch_size: 2 input [ { name: \"z\" data_type: TYPE_FP32 dims: [ 4 ] } ]");
    write_plus_model(root_ / "repo/wrong/1/model.onnx");
    write_text(root_ / "repo/fixed/config.pbtxt", "max_batch_size: 2");
    fs::create_directories(root_ / "repo/fixed/1");
    fs::copy_file(kTestAdd, root_ / "repo/fixed/1/model.onnx");  // its inputs are [3, 4, 5]: no batch axis
    fs::create_directories(root_ / "repo/empty");
    fs::create_directories(root_ / "repo/.hidden/1");
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  ModelRepository::Options options() {
    ModelRepository::Options o;
    o.root = (root_ / "repo").string();
    o.cache_dir = (root_ / "cache").string();
    o.threads = 1;
    o.log = [this](const std::string& line) { log_.push_back(line); };
    return o;
  }
  const ModelRepository::Entry& entry(const std::vector<ModelRepository::Entry>& index, const std::string& name) {
    for (const auto& e : index) {
      if (e.name == name) return e;
    }
    ADD_FAILURE() << "no index entry " << name;
    return index.front();
  }

  fs::path root_;
  std::vector<std::string> log_;
  RepositoryMetrics metrics_;
};

TensorList run(TensorModel& m, std::vector<float> x) {
  const int64_t rows = static_cast<int64_t>(x.size()) / 4;
  ir::Tensor t(ir::DType::kF32, {rows, 4});
  std::copy(x.begin(), x.end(), t.mutable_data<float>());
  auto ticket = m.batcher->submit({{"x", std::move(t)}}, rows);
  EXPECT_TRUE(ticket);
  std::promise<void> p;
  (*ticket)->set_notifier([&p] { p.set_value(); });
  EXPECT_EQ(p.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_TRUE((*ticket)->status) << (*ticket)->status.message();
  return (*ticket)->outputs;
}

TEST_F(ModelRepositoryTest, LoadsWhatItCanAndSaysWhyTheRestIsUnavailable) {
  ModelRepository repo(options(), metrics_);
  repo.load_all();
  const auto index = repo.index();
  EXPECT_EQ(index.size(), 6u);  // not .hidden
  EXPECT_EQ(entry(index, "plus").state, "READY");
  EXPECT_EQ(entry(index, "plus").version, "2");  // the newest version directory
  EXPECT_EQ(entry(index, "add").state, "READY");
  EXPECT_EQ(entry(index, "add").version, "7");
  EXPECT_EQ(entry(index, "typo").state, "UNAVAILABLE");
  EXPECT_NE(entry(index, "typo").reason.find("TYPE_FP33"), std::string::npos) << entry(index, "typo").reason;
  EXPECT_NE(entry(index, "wrong").reason.find("config.pbtxt: input[0].name: the model has no input 'z'"), std::string::npos)
      << entry(index, "wrong").reason;
  EXPECT_NE(entry(index, "fixed").reason.find("max_batch_size: the model's input 'x' has a fixed first dimension of 3"),
            std::string::npos)
      << entry(index, "fixed").reason;
  EXPECT_NE(entry(index, "empty").reason.find("no version directory"), std::string::npos) << entry(index, "empty").reason;

  auto plus = repo.ready("plus");
  ASSERT_TRUE(plus) << plus.status().message();
  // Completed from the engine: the output config.pbtxt left out, without the batch dimension.
  ASSERT_EQ((*plus)->config.outputs.size(), 1u);
  EXPECT_EQ((*plus)->config.outputs[0].name, "y");
  EXPECT_EQ((*plus)->config.outputs[0].dims, (std::vector<int64_t>{4}));
  TensorList y = run(**plus, {10, 20, 30, 40, 0, 0, 0, 0});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].second.shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(y[0].second.data<float>()[3], 44.0f);
  EXPECT_EQ(y[0].second.data<float>()[7], 4.0f);

  auto add = repo.ready("add");
  ASSERT_TRUE(add);
  EXPECT_EQ((*add)->config.max_batch_size, 0);
  EXPECT_EQ((*add)->config.inputs.size(), 2u);
  EXPECT_EQ((*add)->config.inputs[0].dims, (std::vector<int64_t>{3, 4, 5}));

  EXPECT_EQ(repo.ready("nothing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(repo.ready("typo").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(repo.ready("plus", "1"));  // version 2 is served
  EXPECT_TRUE(repo.ready("plus", "2"));
}

TEST_F(ModelRepositoryTest, CompiledEnginesAreReusedAndUnloadKeepsRequestsInFlightWorking) {
  {
    ModelRepository first(options(), metrics_);
    ASSERT_TRUE(first.load("plus"));
  }
  EXPECT_EQ(std::count_if(log_.begin(), log_.end(), [](const std::string& l) { return l.find("compiling") != std::string::npos; }), 1);
  log_.clear();
  ModelRepository repo(options(), metrics_);
  ASSERT_TRUE(repo.load("plus"));
  EXPECT_EQ(std::count_if(log_.begin(), log_.end(), [](const std::string& l) { return l.find("compiling") != std::string::npos; }), 0);

  auto held = repo.ready("plus");
  ASSERT_TRUE(held);
  ASSERT_TRUE(repo.unload("plus"));
  auto gone = repo.ready("plus");
  ASSERT_FALSE(gone);
  EXPECT_NE(gone.status().message().find("UNAVAILABLE: unloaded"), std::string::npos) << gone.status().message();
  EXPECT_EQ(run(**held, {1, 1, 1, 1})[0].second.data<float>()[3], 5.0f);  // the held model still runs

  ASSERT_TRUE(repo.load("plus"));
  EXPECT_TRUE(repo.ready("plus"));
  EXPECT_EQ(repo.load("nothing").code(), StatusCode::kNotFound);
  EXPECT_EQ(repo.load("../repo").code(), StatusCode::kNotFound);

  // A reload whose new config is bad fails and leaves the loaded version serving.
  write_text(root_ / "repo/plus/config.pbtxt", "max_batch_size: -1");
  Status reload = repo.load("plus");
  ASSERT_FALSE(reload);
  EXPECT_NE(reload.message().find("max_batch_size: must be >= 0"), std::string::npos);
  EXPECT_TRUE(repo.ready("plus"));
}

}  // namespace
}  // namespace kiln::server
