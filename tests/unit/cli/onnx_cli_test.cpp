// `kiln check`, `kiln build model.onnx` and `kiln eval --input` as a user runs them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "cli/npy.h"
#include "nlohmann/json.hpp"
#include "support/onnx_test_models.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using kiln::testing::onnx_model;
using kiln::testing::onnx_node;
using kiln::testing::onnx_value;

struct CliRun {
  int status = -1;
  std::string out;
};

CliRun kiln(const std::string& args) {
  CliRun r;
  FILE* p = popen((std::string(KILN_BINARY) + " " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int raw = pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return r;
}

class OnnxCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_onnx_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // y = Softmax(x * x, axis -1) over x [batch, 5]
    onnx::ModelProto m = onnx_model();
    auto* g = m.mutable_graph();
    *g->add_input() = onnx_value("x", onnx::TensorProto::FLOAT, {"batch", "5"});
    *g->add_output() = onnx_value("y", onnx::TensorProto::FLOAT, {"batch", "5"});
    onnx_node(g, "Mul", {"x", "x"}, {"sq"});
    onnx_node(g, "Softmax", {"sq"}, {"y"});
    kiln::testing::onnx_save(m, p("good.onnx"));
    onnx_node(g, "Frobnicate", {"y"}, {"z"}, "frob");
    kiln::testing::onnx_save(m, p("bad.onnx"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(OnnxCliTest, CheckPassesAGoodModelAndListsUnsupportedNodes) {
  CliRun good = kiln("check " + p("good.onnx"));
  EXPECT_EQ(good.status, 0) << good.out;
  CliRun bad = kiln("check " + p("bad.onnx"));
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("node 'frob' (Frobnicate, ai.onnx opset 13): unsupported op"), std::string::npos) << bad.out;
  CliRun json = kiln("check --json " + p("bad.onnx"));
  EXPECT_EQ(json.status, 1);
  auto parsed = nlohmann::json::parse(json.out);
  EXPECT_FALSE(parsed.at("supported").get<bool>());
  EXPECT_EQ(parsed.at("unsupported").at(0).at("op_type"), "Frobnicate");
}

TEST_F(OnnxCliTest, BuildAndEvalRunTheModelOnNpyInputs) {
  CliRun built = kiln("build " + p("good.onnx") + " -o " + p("good.kiln") + " --no-autotune");
  ASSERT_EQ(built.status, 0) << built.out;
  ir::Tensor x(ir::DType::kF32, {2, 5});
  for (int i = 0; i < 10; ++i) x.mutable_data<float>()[i] = 0.1f * static_cast<float>(i);
  ASSERT_TRUE(npy_write(p("x.npy"), x).is_ok());
  CliRun ran = kiln("eval " + p("good.kiln") + " --input x=" + p("x.npy") + " --outputs-dir " + p("out"));
  ASSERT_EQ(ran.status, 0) << ran.out;
  auto y = npy_read(p("out/y.npy"));
  ASSERT_TRUE(y) << y.status().message();
  ASSERT_EQ(y->shape(), (ir::Shape{2, 5}));
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int c = 0; c < 5; ++c) {
      double denom = 0;
      const double v = 0.1 * (r * 5 + c);
      for (int k = 0; k < 5; ++k) denom += std::exp(0.01 * (r * 5 + k) * (r * 5 + k) - v * v);
      EXPECT_NEAR(y->data<float>()[r * 5 + c], 1.0 / denom, 1e-6);
      sum += y->data<float>()[r * 5 + c];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  ir::Tensor wrong(ir::DType::kI64, {2, 5});
  ASSERT_TRUE(npy_write(p("w.npy"), wrong).is_ok());
  CliRun bad = kiln("eval " + p("good.kiln") + " --input x=" + p("w.npy") + " --outputs-dir " + p("out"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("input 'x' is i64, the model takes f32"), std::string::npos) << bad.out;
  CliRun missing = kiln("eval " + p("good.kiln") + " --outputs-dir " + p("out"));
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.out.find("missing input 'x'"), std::string::npos) << missing.out;
}

TEST_F(OnnxCliTest, BuildRefusesAnUnsupportedModelNamingTheNode) {
  CliRun r = kiln("build " + p("bad.onnx") + " -o " + p("bad.kiln"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("node 'frob'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(p("bad.kiln")));
}

// kiln inspect says what each pass did: the two no-ops removed, the BatchNormalization folded
// into the convolution before it.
TEST_F(OnnxCliTest, InspectReportsWhatEachPassRemovedOrFused) {
  onnx::ModelProto m = onnx_model();
  auto* g = m.mutable_graph();
  *g->add_input() = onnx_value("x", onnx::TensorProto::FLOAT, {"1", "2", "4", "4"});
  *g->add_output() = onnx_value("y", onnx::TensorProto::FLOAT, {"1", "3", "4", "4"});
  kiln::testing::onnx_float_initializer(g, "w", {3, 2, 1, 1}, {1, 2, 3, 4, 5, 6});
  for (const char* name : {"scale", "shift", "mean", "var"}) kiln::testing::onnx_float_initializer(g, name, {3}, {1, 2, 3});
  onnx_node(g, "Identity", {"x"}, {"x1"}, "copy");
  onnx_node(g, "Conv", {"x1", "w"}, {"c"}, "conv");
  onnx_node(g, "BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"n"}, "bn");
  onnx_node(g, "Dropout", {"n"}, {"y"}, "drop");
  kiln::testing::onnx_save(m, p("convbn.onnx"));
  CliRun built = kiln("build " + p("convbn.onnx") + " -o " + p("convbn.kiln") + " --no-autotune");
  ASSERT_EQ(built.status, 0) << built.out;
  EXPECT_NE(built.out.find("folded 1 BatchNormalization nodes"), std::string::npos) << built.out;
  CliRun shown = kiln("inspect " + p("convbn.kiln"));
  ASSERT_EQ(shown.status, 0) << shown.out;
  // The line of a pass: its name, then "before -> after", then the change when there is one.
  auto line_of = [&](const std::string& pass) {
    const size_t at = shown.out.find("\n  " + pass + " ");
    return at == std::string::npos ? std::string() : shown.out.substr(at + 1, shown.out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(line_of("eliminate_noops").find("4 -> 2"), std::string::npos) << shown.out;
  EXPECT_NE(line_of("eliminate_noops").find("(-2)"), std::string::npos) << shown.out;
  EXPECT_NE(line_of("fuse_conv_batchnorm").find("2 -> 1"), std::string::npos) << shown.out;
  EXPECT_NE(line_of("fuse_conv_batchnorm").find("(-1)"), std::string::npos) << shown.out;
  EXPECT_NE(line_of("plan_memory").find("1 -> 1"), std::string::npos) << shown.out;
  EXPECT_EQ(line_of("plan_memory").find('('), std::string::npos) << shown.out;
}

TEST_F(OnnxCliTest, ProfilesAreRecordedShownAndEnforced) {
  CliRun built = kiln("build " + p("good.onnx") + " -o " + p("prof.kiln") + " --no-autotune --profile x:1x5,2x5,4x5");
  ASSERT_EQ(built.status, 0) << built.out;
  CliRun shown = kiln("inspect " + p("prof.kiln"));
  ASSERT_EQ(shown.status, 0) << shown.out;
  EXPECT_NE(shown.out.find("profile min 1x5  opt 2x5  max 4x5"), std::string::npos) << shown.out;
  ir::Tensor inside(ir::DType::kF32, {4, 5}), outside(ir::DType::kF32, {6, 5});
  ASSERT_TRUE(npy_write(p("in.npy"), inside).is_ok());
  ASSERT_TRUE(npy_write(p("out.npy"), outside).is_ok());
  CliRun ok = kiln("eval " + p("prof.kiln") + " --input x=" + p("in.npy") + " --outputs-dir " + p("o"));
  EXPECT_EQ(ok.status, 0) << ok.out;
  CliRun refused = kiln("eval " + p("prof.kiln") + " --input x=" + p("out.npy") + " --outputs-dir " + p("o"));
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.out.find("input 'x' has shape [6, 5], outside its profile: min [1, 5], max [4, 5]"),
            std::string::npos)
      << refused.out;
}

TEST_F(OnnxCliTest, BuildRefusesAProfileThatDoesNotFitTheInput) {
  const std::pair<std::string, std::string> cases[] = {
      {"x:1x4,2x5,4x5", "profile of input 'x': dimension 1 is fixed at 5"},
      {"x:3x5,2x5,4x5", "min <= opt <= max"},
      {"z:1x5,2x5,4x5", "the model has no such input (its inputs: x)"},
      {"x:1x5,2x5", "must give three shapes"},
  };
  for (const auto& [profile, message] : cases) {
    CliRun r = kiln("build " + p("good.onnx") + " -o " + p("p.kiln") + " --profile " + profile);
    EXPECT_EQ(r.status, 1) << profile;
    EXPECT_NE(r.out.find(message), std::string::npos) << profile << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(p("p.kiln")));
}

}  // namespace
}  // namespace kiln::cli
