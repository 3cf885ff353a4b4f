// ONNX conformance: every node test of Debian's libonnx-testdata (model.onnx plus
// test_data_set_0/input_N.pb and output_N.pb) goes through the whole `kiln build` path — import,
// the pass pipeline, an engine file on disk, load, the CPU tensor runner — and its outputs are
// compared with the expected ones (floats: |got - want| <= atol + rtol * |want|, NaN matches NaN).
//
// Tests listed in onnx_node_exclusions.txt (one name a line, with the reason after '#') are
// skipped; every other test must pass, and an excluded test that passes fails the run so that
// the list stays exact. The pass count is printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_tuner.h"
#include "backends/cpu/tensor/tensor_graph_runner.h"
#include "engine/engine_builder.h"
#include "formats/onnx/onnx_model.h"
#include "formats/onnx/onnx_tensor.h"
#include "runtime/loaded_model.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-5;

std::string data_dir() {
  const char* env = std::getenv("KILN_ONNX_NODE_TESTS");
  return env ? env : "/usr/share/libonnx-testdata/data/node";
}

std::map<std::string, std::string> read_exclusions() {
  std::map<std::string, std::string> out;
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/tests/onnx/onnx_node_exclusions.txt");
  std::string line;
  while (std::getline(f, line)) {
    const size_t hash = line.find('#');
    std::string name = line.substr(0, hash);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name.empty()) continue;
    out[name] = hash == std::string::npos ? "" : line.substr(hash + 1);
  }
  return out;
}

std::vector<std::string> sorted_pb(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> files;
  for (int i = 0;; ++i) {
    const fs::path p = dir / (prefix + "_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    files.push_back(p.string());
  }
  return files;
}

std::string compare(const ir::Tensor& got, const ir::Tensor& want) {
  if (got.dtype() != want.dtype()) {
    return "dtype " + std::string(ir::dtype_name(got.dtype())) + ", expected " + std::string(ir::dtype_name(want.dtype()));
  }
  if (got.shape() != want.shape()) {
    return "shape " + ir::shape_to_string(got.shape()) + ", expected " + ir::shape_to_string(want.shape());
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (ir::dtype_is_float(want.dtype())) {
      const double g = ir::tensor_get_f64(got, i), w = ir::tensor_get_f64(want, i);
      if (std::isnan(w) && std::isnan(g)) continue;
      if (std::isinf(w) && g == w) continue;
      if (!(std::fabs(g - w) <= kAtol + kRtol * std::fabs(w))) {
        return "element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " + std::to_string(w);
      }
    } else if (ir::tensor_get_i64(got, i) != ir::tensor_get_i64(want, i)) {
      return "element " + std::to_string(i) + " is " + std::to_string(ir::tensor_get_i64(got, i)) + ", expected " +
             std::to_string(ir::tensor_get_i64(want, i));
    }
  }
  return "";
}

// The test data of onnx 1.12 stores bfloat16 tensors with the uint16 type (the same bits): such a
// tensor is read as bf16 where the graph's value is bf16.
ir::Tensor as_declared(ir::Tensor t, ir::DType declared) {
  if (t.dtype() != ir::DType::kU16 || declared != ir::DType::kBF16) return t;
  ir::Tensor bf16(ir::DType::kBF16, t.shape());
  if (t.numel() > 0) std::memcpy(bf16.mutable_bytes(), t.bytes(), t.byte_size());
  return bf16;
}

// "" when the test passes, else why not.
std::string run_node_test(const fs::path& dir, const fs::path& scratch) {
  cpu::CpuKernelTuner tuner(cpu::isa_active());
  cpu::CpuNodeEvaluator evaluator;
  engine::EngineBuildRequest req;
  req.model_dir = (dir / "model.onnx").string();
  req.output_path = (scratch / (dir.filename().string() + ".kiln")).string();
  req.options.autotune = false;
  engine::EngineBuildHooks hooks;
  hooks.tuner = &tuner;
  hooks.evaluator = &evaluator;
  Status built = engine::build_engine(req, hooks);
  if (!built) return "build: " + built.message();
  auto model = runtime::LoadedModel::load(req.output_path);
  fs::remove(req.output_path);
  if (!model) return "load: " + model.status().message();
  const ir::Graph& graph = (*model)->graph();
  auto runner = cpu::TensorGraphRunner::create(graph);
  if (!runner) return "prepare: " + runner.status().message();
  const fs::path data = dir / "test_data_set_0";
  const auto input_files = sorted_pb(data, "input"), output_files = sorted_pb(data, "output");
  if (input_files.size() != graph.inputs().size()) return "the test feeds " + std::to_string(input_files.size()) + " inputs";
  std::map<std::string, ir::Tensor> feed;
  for (size_t i = 0; i < input_files.size(); ++i) {
    auto t = formats::onnx_tensor_read_file(input_files[i]);
    if (!t) return "input: " + t.status().message();
    const ir::Value& input = graph.value(graph.inputs()[i]);
    feed[input.name] = as_declared(std::move(*t), input.dtype);
  }
  auto outputs = (*runner)->run(feed);
  if (!outputs) return "run: " + outputs.status().message();
  if (outputs->size() != output_files.size()) return "output count differs";
  for (size_t i = 0; i < output_files.size(); ++i) {
    auto want = formats::onnx_tensor_read_file(output_files[i]);
    if (!want) return "expected output: " + want.status().message();
    const std::string diff = compare((*outputs)[i].second, as_declared(*want, (*outputs)[i].second.dtype()));
    if (!diff.empty()) return "output '" + (*outputs)[i].first + "': " + diff;
  }
  return "";
}

TEST(OnnxNodeConformance, EveryTestNotExcludedPasses) {
  const fs::path root = data_dir();
  if (!fs::exists(root)) GTEST_SKIP() << root << " is missing; scripts/setup.sh installs libonnx-testdata";
  const auto excluded = read_exclusions();
  std::vector<fs::path> tests;
  for (const auto& e : fs::directory_iterator(root)) {
    if (fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
  }
  std::sort(tests.begin(), tests.end());
  const fs::path scratch = fs::temp_directory_path() / ("kiln_onnx_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  int passed = 0, skipped = 0, failed = 0, stale = 0;
  const bool list_all = std::getenv("KILN_ONNX_LIST") != nullptr;
  for (const auto& dir : tests) {
    const std::string name = dir.filename().string();
    const std::string why = run_node_test(dir, scratch);
    const bool is_excluded = excluded.count(name) != 0;
    if (list_all && !why.empty()) std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
    if (is_excluded) {
      ++skipped;
      if (why.empty()) {
        ++stale;
        ADD_FAILURE() << name << " passes now: remove it from tests/onnx/onnx_node_exclusions.txt";
      }
      continue;
    }
    if (why.empty()) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << name << ": " << why;
    }
  }
  fs::remove_all(scratch);
  std::printf("onnx node tests: %d passed, %d failed, %d excluded of %zu (%.1f%% pass)\n", passed, failed, skipped,
              tests.size(), 100.0 * passed / static_cast<double>(std::max<size_t>(tests.size(), 1)));
  EXPECT_EQ(stale, 0);
}

}  // namespace
}  // namespace kiln
