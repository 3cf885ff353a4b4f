// The registry maps targets to backends and tuners; a general engine runs through the backend
// its target names, as the model repository and `kiln eval` run it.
#include "backends/registry/backend_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "engine/engine_builder.h"
#include "runtime/loaded_model.h"

namespace kiln::backends {
namespace {

namespace fs = std::filesystem;

TEST(BackendRegistry, CpuTargetsOpenTheCpuBackend) {
  auto opened = open_backend("cpu-avx2", 1);
  ASSERT_TRUE(opened) << opened.status().message();
  EXPECT_EQ(opened->backend->target().rfind("cpu-", 0), 0u);
  EXPECT_EQ(opened->device, "cpu (1 threads)");
}

TEST(BackendRegistry, ACudaTargetOpensTheGpuOrSaysWhyNot) {
  auto opened = open_backend("cuda-sm90", 1);
  if (opened) {
    EXPECT_EQ(opened->backend->target().rfind("cuda-", 0), 0u);
  } else {
    // Without the CUDA backend in this build, or without a GPU here: a message that says which.
    EXPECT_NE(opened.status().message().find("CUDA"), std::string::npos) << opened.status().message();
  }
}

TEST(BackendRegistry, KernelTunersExistForCpuAndCudaBuildsOnly) {
  bool autotune = true;
  auto cpu = make_kernel_tuner("cpu", autotune);
  ASSERT_TRUE(cpu) << cpu.status().message();
  EXPECT_EQ((*cpu)->target().rfind("cpu-", 0), 0u);
  EXPECT_TRUE(autotune);
  auto other = make_kernel_tuner("tpu", autotune);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.status().message(), "--target must be cpu or cuda");
}

// ONNX's Relu node test (Debian's libonnx-testdata), compiled and run through the CPU backend's
// GraphRunner: y = max(x, 0) on a [3, 4, 5] input.
TEST(BackendRegistry, AGeneralEngineRunsThroughItsTargetsBackend) {
  const std::string model = "/usr/share/libonnx-testdata/data/node/test_relu/model.onnx";
  ASSERT_TRUE(fs::exists(model)) << model << " is installed by scripts/setup.sh (libonnx-testdata)";
  const fs::path engine_path = fs::temp_directory_path() / ("kiln_registry_relu_" + std::to_string(::getpid()) + ".kiln");
  bool autotune = false;
  auto tuner = make_kernel_tuner("cpu", autotune);
  ASSERT_TRUE(tuner);
  auto evaluator = make_node_evaluator();
  engine::EngineBuildRequest req;
  req.model_dir = model;
  req.output_path = engine_path.string();
  engine::EngineBuildHooks hooks;
  hooks.tuner = tuner->get();
  hooks.evaluator = evaluator.get();
  ASSERT_TRUE(engine::build_engine(req, hooks));
  auto loaded = runtime::LoadedModel::load(engine_path.string());
  ASSERT_TRUE(loaded) << loaded.status().message();
  auto opened = open_backend((*loaded)->file().header().target, 1);
  ASSERT_TRUE(opened) << opened.status().message();
  auto runner = opened->backend->create_graph_runner(**loaded);
  ASSERT_TRUE(runner) << runner.status().message();

  ir::Tensor x(ir::DType::kF32, {3, 4, 5});
  float* xs = x.mutable_data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) xs[i] = static_cast<float>(i % 7) - 3.5f;
  auto out = (*runner)->run({{"x", x}});
  ASSERT_TRUE(out) << out.status().message();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].first, "y");
  const ir::Tensor& y = (*out)[0].second;
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.data<float>()[i], std::fmax(xs[i], 0.0f)) << i;

  // A wrong input is refused by name, and the runner stays usable.
  auto bad = (*runner)->run({{"x", ir::Tensor(ir::DType::kF32, {3, 4})}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("'x'"), std::string::npos) << bad.status().message();
  EXPECT_TRUE((*runner)->run({{"x", x}}));
  fs::remove(engine_path);
}

}  // namespace
}  // namespace kiln::backends
