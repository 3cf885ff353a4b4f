// A sequence's logits do not depend on how its tokens are batched. The serving loop runs a
// prompt whole, in chunks beside other sequences' tokens, or one token per step, and decodes it
// among any number of other rows; greedy tokens must equal those the sequence gives alone, so
// the logits must be the same bits every way. Here the bundled demo model is built in each
// weight format (with each format's default kernels, and bf16 also with timed ones) and a prompt
// is fed whole, in chunks of 5 and token by token: every row of logits must be identical.
// Matmul rows (MatmulKernelTest.RowsDoNotDependOnTheOtherRows) and attention rows depend only
// on their own row; this checks that the whole step keeps it so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_tuner.h"
#include "engine/engine_builder.h"
#include "runtime/executor.h"
#include "runtime/kv_cache.h"
#include "runtime/loaded_model.h"
#include "runtime/sequence_runner.h"

namespace kiln::llm {
namespace {

namespace fs = std::filesystem;

struct Variant {
  const char* name;
  ir::WeightFormat format;
  bool autotune;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class BatchInvarianceTest : public ::testing::TestWithParam<Variant> {};

TEST_P(BatchInvarianceTest, LogitsAreTheSameBitsWhicheverWayThePromptIsFed) {
  const Variant v = GetParam();
  // Two threads, so that work is split as when serving; the process's setting comes back after.
  struct Threads {
    int saved = cpu::cpu_threads();
    Threads() { cpu::cpu_set_threads(2); }
    ~Threads() { cpu::cpu_set_threads(saved); }
  } threads;
  const std::string path =
      (fs::temp_directory_path() / ("kiln_invariance_" + std::to_string(getpid()) + "_" + v.name + ".kiln")).string();
  cpu::CpuKernelTuner tuner(cpu::isa_active());
  engine::EngineBuildRequest req;
  req.model_dir = std::string(KILN_SOURCE_DIR) + "/models/demo";
  req.output_path = path;
  req.options.matmul_format = v.format;
  req.options.max_batch_tokens = 64;
  req.options.autotune = v.autotune;
  engine::EngineBuildHooks hooks;
  hooks.tuner = &tuner;
  ASSERT_TRUE(engine::build_engine(req, hooks));
  auto model = runtime::LoadedModel::load(path);
  fs::remove(path);
  ASSERT_TRUE(model) << model.status().message();
  cpu::CpuBackend backend;
  auto executor = runtime::Executor::create(**model, backend);
  ASSERT_TRUE(executor) << executor.status().message();
  const int64_t vocab = (*model)->facts().vocab_size;

  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  auto logits = [&](int64_t chunk) {
    runtime::KvCache cache((*executor)->kv_cache_spec(16, 16));
    runtime::SequenceRunner runner(**executor, cache, vocab);
    auto out = runner.feed(prompt, /*all_logits=*/true, chunk);
    EXPECT_TRUE(out) << out.status().message();
    return out ? *out : std::vector<float>{};
  };
  const std::vector<float> whole = logits(0);
  ASSERT_EQ(whole.size(), prompt.size() * static_cast<size_t>(vocab));
  for (int64_t chunk : {1, 5}) {
    const std::vector<float> fed = logits(chunk);
    ASSERT_EQ(fed.size(), whole.size());
    for (size_t row = 0; row < prompt.size(); ++row) {
      const size_t at = row * static_cast<size_t>(vocab);
      ASSERT_EQ(std::memcmp(fed.data() + at, whole.data() + at, static_cast<size_t>(vocab) * sizeof(float)), 0)
          << v.name << ": row " << row << " fed in chunks of " << chunk << " differs from the whole prompt in one step";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, BatchInvarianceTest,
                         ::testing::Values(Variant{"f32", ir::WeightFormat::kF32, false},
                                           Variant{"bf16", ir::WeightFormat::kBF16, false},
                                           Variant{"bf16_timed", ir::WeightFormat::kBF16, true},
                                           Variant{"f16", ir::WeightFormat::kF16, false},
                                           Variant{"i8c", ir::WeightFormat::kI8Channel, false},
                                           Variant{"i4g32", ir::WeightFormat::kI4Group32, false}),
                         [](const ::testing::TestParamInfo<Variant>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace kiln::llm
