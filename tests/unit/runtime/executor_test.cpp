// The executor and KV cache validate every step before touching the cache. These tests use a
// backend that runs nothing, so they check the runtime's own logic in isolation.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "engine/engine_builder.h"
#include "engine/engine_file.h"
#include "unit/engine/engine_test_support.h"
#include "runtime/executor.h"
#include "runtime/kv_cache.h"
#include "runtime/loaded_model.h"

namespace kiln::runtime {
namespace {

namespace fs = std::filesystem;

class OneKernelTuner : public passes::KernelTuner {
 public:
  std::string target() const override { return "cpu-scalar"; }
  std::vector<std::string> matmul_candidates(ir::WeightFormat) const override { return {"any"}; }
  double time_matmul(const std::string&, ir::WeightFormat, int64_t, int64_t, int64_t) override { return 1; }
};

class RecordingBackend : public Backend {
 public:
  std::string target() const override { return "cpu-scalar"; }
  Status check_target(const std::string& t) const override {
    return t == "cpu-scalar" ? Status::ok() : invalid_argument("wrong target " + t);
  }
  Status prepare(const LoadedModel& model, int64_t max_tokens) override {
    nodes = model.graph().nodes().size();
    vocab = model.facts().vocab_size;
    prepared_tokens = max_tokens;
    return Status::ok();
  }
  Expected<std::unique_ptr<DeviceBuffer>> allocate(size_t bytes) override {
    return std::unique_ptr<DeviceBuffer>(std::make_unique<HostBuffer>(bytes));
  }
  Expected<std::span<const float>> run_step(const StepView& step) override {
    ++runs;
    last_tokens = step.num_tokens;
    last_rows = step.num_rows;
    // Row r's largest logit is at token (3 r + 5) mod vocab.
    logits.assign(static_cast<size_t>(step.num_rows * vocab), 0.0f);
    for (int64_t r = 0; r < step.num_rows; ++r) logits[static_cast<size_t>(r * vocab + (3 * r + 5) % vocab)] = 1.0f;
    return std::span<const float>(logits);
  }
  size_t nodes = 0, runs = 0;
  int64_t vocab = 0, prepared_tokens = 0, last_tokens = 0, last_rows = 0;
  std::vector<float> logits;
};

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("kiln_executor_test_" + std::to_string(::getpid()) + ".kiln")).string();
    OneKernelTuner tuner;
    engine::EngineBuildRequest req;
    req.model_dir = std::string(KILN_SOURCE_DIR) + "/tests/golden/data/llama_gqa";
    req.output_path = path_;
    req.options.max_batch_tokens = 16;
    req.max_seq_len = 40;
    engine::EngineBuildHooks hooks;
    hooks.tuner = &tuner;
    ASSERT_TRUE(engine::build_engine(req, hooks));
    auto m = LoadedModel::load(path_);
    ASSERT_TRUE(m) << m.status().message();
    model_ = std::move(*m);
    auto ex = Executor::create(*model_, backend_);
    ASSERT_TRUE(ex) << ex.status().message();
    executor_ = std::move(*ex);
    cache_ = std::make_unique<KvCache>(executor_->kv_cache_spec(8, 4));
  }
  void TearDown() override { fs::remove(path_); }

  Status run(std::vector<int32_t> tokens, int64_t context, std::vector<int32_t> table, bool all = false) {
    SequenceStep s;
    s.tokens = tokens;
    s.context_len = context;
    s.block_table = table;
    s.all_logits = all;
    return executor_->step({&s, 1}, *cache_).status();
  }

  std::string path_;
  std::unique_ptr<LoadedModel> model_;
  RecordingBackend backend_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<KvCache> cache_;
};

TEST_F(ExecutorTest, AValidStepRunsOnceOnTheBackend) {
  ASSERT_TRUE(run({1, 2, 3}, 0, {0}, true));
  EXPECT_EQ(backend_.runs, 1u);
  EXPECT_EQ(backend_.prepared_tokens, 16);
  EXPECT_EQ(backend_.last_tokens, 3);
  EXPECT_EQ(backend_.last_rows, 3);
  ASSERT_TRUE(run({4}, 3, {0}));
  EXPECT_EQ(backend_.last_rows, 1);
}

TEST_F(ExecutorTest, BadStepsAreRejectedWithoutRunningAnything) {
  const struct {
    std::vector<int32_t> tokens;
    int64_t context;
    std::vector<int32_t> table;
    const char* expect;
  } cases[] = {
      {{1, 384}, 0, {0}, "outside the vocabulary"},
      {{-1}, 0, {0}, "outside the vocabulary"},
      {{}, 0, {0}, "no new tokens"},
      {{1, 2, 3, 4, 5}, 0, {0}, "block table covers fewer"},
      {{1}, 0, {99}, "out of range"},
      {{1}, 40, {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2}, "max sequence length"},
      {std::vector<int32_t>(17, 1), 0, {0, 1, 2, 3, 4}, "exceeds the engine's 16"},
      {{1}, -3, {0}, "negative context"},
  };
  for (const auto& c : cases) {
    const size_t before = backend_.runs;
    Status st = run(c.tokens, c.context, c.table);
    ASSERT_FALSE(st) << c.expect;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
    EXPECT_EQ(backend_.runs, before);
  }
}

TEST_F(ExecutorTest, SampledStepsChooseEachRowsTokenAndCheckTheirRows) {
  SequenceStep s;
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<int32_t> table = {0};
  s.tokens = tokens;
  s.block_table = table;
  s.all_logits = true;
  SamplingBatch batch;
  for (int r = 0; r < 3; ++r) batch.add_row();
  batch.host_rows = {1};
  auto out = executor_->step_sampled({&s, 1}, *cache_, batch);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(std::vector<int32_t>(out->ids.begin(), out->ids.end()), (std::vector<int32_t>{5, 8, 11}));
  // Row 1's logits, as the backend produced them.
  const std::span<const float> row1 = std::span<const float>(backend_.logits).subspan(backend_.vocab, backend_.vocab);
  EXPECT_TRUE(std::equal(out->logits.begin(), out->logits.end(), row1.begin(), row1.end()));
  EXPECT_FALSE(executor_->samples_on_device());

  const size_t before = backend_.runs;
  batch.rows.pop_back();
  auto too_few = executor_->step_sampled({&s, 1}, *cache_, batch);
  ASSERT_FALSE(too_few);
  EXPECT_NE(too_few.status().message().find("3 logits rows but 2 sampling rows"), std::string::npos);
  batch.host_rows = {2, 1};
  batch.add_row();
  auto unordered = executor_->step_sampled({&s, 1}, *cache_, batch);
  ASSERT_FALSE(unordered);
  EXPECT_NE(unordered.status().message().find("host row 1 is out of order"), std::string::npos);
  batch.host_rows.clear();
  batch.rows.pop_back();
  batch.add_row().uniform = 1.0;
  auto bad_draw = executor_->step_sampled({&s, 1}, *cache_, batch);
  ASSERT_FALSE(bad_draw);
  EXPECT_NE(bad_draw.status().message().find("sampling row 2: uniform"), std::string::npos);
  EXPECT_EQ(backend_.runs, before);
}

TEST_F(ExecutorTest, ACacheForAnotherModelIsRejected) {
  KvCacheSpec spec = executor_->kv_cache_spec(4, 4);
  spec.head_dim += 1;
  KvCache other(spec);
  SequenceStep s;
  const std::vector<int32_t> tokens = {1};
  const std::vector<int32_t> table = {0};
  s.tokens = tokens;
  s.block_table = table;
  EXPECT_FALSE(executor_->step({&s, 1}, other));
}

TEST_F(ExecutorTest, AKvCacheDtypeTheBackendDoesNotRunIsRefused) {
  // The recording backend, like the CUDA one, runs fp32 caches only.
  auto made = executor_->create_kv_cache(4, 4, KvCacheDtype::kBF16);
  ASSERT_FALSE(made);
  EXPECT_NE(made.status().message().find("no bf16 KV cache"), std::string::npos) << made.status().message();
  KvCache bf16(executor_->kv_cache_spec(4, 4, KvCacheDtype::kBF16));
  EXPECT_EQ(bf16.spec().bytes() * 2, executor_->kv_cache_spec(4, 4).bytes());
  SequenceStep s;
  const std::vector<int32_t> tokens = {1};
  const std::vector<int32_t> table = {0};
  s.tokens = tokens;
  s.block_table = table;
  const size_t before = backend_.runs;
  EXPECT_FALSE(executor_->step({&s, 1}, bf16));
  EXPECT_EQ(backend_.runs, before);
  EXPECT_TRUE(executor_->create_kv_cache(4, 4, KvCacheDtype::kF32));
  EXPECT_EQ(parse_kv_cache_dtype("bf16").value(), KvCacheDtype::kBF16);
  EXPECT_EQ(parse_kv_cache_dtype("fp8").value(), KvCacheDtype::kFP8);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3").value(), KvCacheDtype::kFP8);
  EXPECT_EQ(kv_cache_dtype_name(KvCacheDtype::kFP8), "fp8");
  EXPECT_EQ(executor_->kv_cache_spec(4, 4, KvCacheDtype::kFP8).bytes() * 4, executor_->kv_cache_spec(4, 4).bytes());
  EXPECT_FALSE(parse_kv_cache_dtype("fp16"));
  EXPECT_FALSE(parse_kv_cache_dtype("auto"));
  // The command-line choice: "auto" is no element yet (the engine decides), the others are.
  EXPECT_EQ(parse_kv_cache_dtype_choice("auto").value(), std::nullopt);
  EXPECT_EQ(parse_kv_cache_dtype_choice("fp32").value(), KvCacheDtype::kF32);
  EXPECT_EQ(parse_kv_cache_dtype_choice("bf16").value(), KvCacheDtype::kBF16);
  const auto bad = parse_kv_cache_dtype_choice("fp16");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("auto, fp32, bf16, fp8"), std::string::npos) << bad.status().message();
}

TEST_F(ExecutorTest, AnEngineForAnotherTargetIsRefusedByTheBackend) {
  struct OtherBackend : RecordingBackend {
    Status check_target(const std::string& t) const override { return invalid_argument("built for " + t); }
  } other;
  auto ex = Executor::create(*model_, other);
  ASSERT_FALSE(ex);
  EXPECT_NE(ex.status().message().find("cpu-scalar"), std::string::npos);
}

// A weight whose stored format cannot hold its shape (a panel format needs rows in multiples of
// 8; a norm scale has one row) is refused at load with one line naming it, never run.
TEST_F(ExecutorTest, AWeightFormatThatDoesNotFitItsShapeIsRefusedAtLoad) {
  auto file = engine::EngineFile::open(path_, {});
  ASSERT_TRUE(file) << file.status().message();
  nlohmann::json meta = file->metadata();
  auto& weights = meta.at("graph").at("weights");
  std::string victim;
  for (auto& [name, w] : weights.items()) {
    if (w.at("shape").size() == 1) {
      victim = name;
      w["format"] = "bf16p8";
      break;
    }
  }
  ASSERT_FALSE(victim.empty());
  const std::string forged = path_ + ".forged";
  engine::testing::write_bytes(forged, engine::testing::forge_engine(meta.dump(), file->header().data_size));
  auto m = LoadedModel::load(forged);
  fs::remove(forged);
  engine::testing::expect_error(m.status(), StatusCode::kInvalidArgument, {victim, "bf16p8", "kiln build"});
}

TEST(KvCache, ReserveGrowsTablesAndFreeReturnsBlocks) {
  KvCacheSpec spec{.num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .block_size = 4, .num_blocks = 3};
  KvCache cache(spec);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(cache.kv_cache_reserve(a, 5));
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(cache.free_blocks(), 1);
  Status st = cache.kv_cache_reserve(b, 9);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("KV cache is full"), std::string::npos);
  EXPECT_TRUE(b.empty());
  cache.kv_cache_free(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(cache.free_blocks(), 3);
  ASSERT_TRUE(cache.kv_cache_reserve(b, 9));
  EXPECT_EQ(b.size(), 3u);
  EXPECT_NE(b[0], b[1]);
  EXPECT_NE(b[1], b[2]);
}

}  // namespace
}  // namespace kiln::runtime
