// The CUDA backend end to end on the golden models (tests/golden/data; see its README): engines
// built with --target cuda against the reference logits and greedy continuations, against the
// CPU engine of the same format, over chunked, batched and graph-replayed steps; and the target
// checks between CPU and CUDA engines (these run without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_tuner.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_tuner.h"
#include "engine/engine_builder.h"
#include "nlohmann/json.hpp"
#include "runtime/sequence_runner.h"
#include "support/npy_reader.h"
#include "unit/backends_cuda/cuda_test_support.h"

namespace kiln::cuda {
namespace {

namespace fs = std::filesystem;

// KILN_SOURCE_DIR in the environment points the tests at another checkout (a GPU machine that
// runs binaries built elsewhere).
const fs::path kData = fs::path(std::getenv("KILN_SOURCE_DIR") != nullptr ? std::getenv("KILN_SOURCE_DIR")
                                                                          : KILN_SOURCE_DIR) /
                       "tests/golden/data";

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kData)) {
    if (fs::exists(e.path() / "golden.json")) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json load_golden(const std::string& name) {
  std::ifstream in(kData / name / "golden.json");
  return nlohmann::json::parse(in);
}

// Builds `case_name` in `format` for the CUDA target (kernels timed on the GPU when `timed`;
// untimed builds take each list's first kernel: fp32 activations throughout) or the CPU.
// `simulate`: the weights rounded through `format` and stored as f32 (the CPU's reference for
// quantised engines).
std::string build(const std::string& case_name, ir::WeightFormat format, bool cuda, bool timed = false,
                  bool simulate = false) {
  const std::string path = (fs::temp_directory_path() / ("kiln_cuda_test_" + case_name + "_" +
                                                        std::string(ir::weight_format_name(format)) +
                                                        (cuda ? (timed ? "_timed" : "_cuda") : "_cpu") +
                                                        (simulate ? "_simulated" : "") + ".kiln"))
                               .string();
  engine::EngineBuildRequest req;
  req.model_dir = (kData / case_name).string();
  req.output_path = path;
  req.options.matmul_format = format;
  req.options.max_batch_tokens = 64;
  req.options.autotune = timed;
  req.options.simulate_quantization = simulate;
  engine::EngineBuildHooks hooks;
  std::unique_ptr<passes::KernelTuner> tuner;
  if (cuda) {
    auto t = CudaKernelTuner::create(timed);
    EXPECT_TRUE(t) << t.status().message();
    if (!t) return "";
    tuner = std::move(*t);
  } else {
    cpu::cpu_set_threads(2);
    tuner = std::make_unique<cpu::CpuKernelTuner>(cpu::isa_active());
  }
  hooks.tuner = tuner.get();
  Status st = engine::build_engine(req, hooks);
  EXPECT_TRUE(st) << st.message();
  return path;
}

// A loaded engine on its backend with a 64-block cache of 4 positions each (of `kv` elements).
class Engine {
 public:
  Engine(const std::string& case_name, ir::WeightFormat format, bool cuda, bool timed = false,
         runtime::KvCacheDtype kv = runtime::KvCacheDtype::kF32, bool simulate = false)
      : path_(build(case_name, format, cuda, timed, simulate)) {
    auto m = runtime::LoadedModel::load(path_);
    EXPECT_TRUE(m) << m.status().message();
    if (!m) return;
    model_ = std::move(*m);
    if (cuda) {
      auto b = CudaBackend::create(0);
      EXPECT_TRUE(b) << b.status().message();
      if (!b) return;
      gpu_ = b->get();
      backend_ = std::move(*b);
    } else {
      backend_ = std::make_unique<cpu::CpuBackend>();
    }
    auto ex = runtime::Executor::create(*model_, *backend_);
    EXPECT_TRUE(ex) << ex.status().message();
    if (!ex) return;
    executor_ = std::move(*ex);
    auto cache = executor_->create_kv_cache(64, 4, kv);
    EXPECT_TRUE(cache) << cache.status().message();
    if (cache) cache_ = std::move(*cache);
  }
  ~Engine() { fs::remove(path_); }
  bool ok() const { return cache_ != nullptr; }
  int64_t vocab() const { return model_->facts().vocab_size; }
  runtime::Executor& executor() { return *executor_; }
  runtime::KvCache& cache() { return *cache_; }
  CudaBackend* gpu() { return gpu_; }
  const runtime::LoadedModel& model() const { return *model_; }

  std::vector<float> logits(const std::vector<int32_t>& ids, int64_t chunk = 0) {
    runtime::SequenceRunner r(*executor_, *cache_, vocab());
    auto out = r.feed(ids, true, chunk);
    EXPECT_TRUE(out) << out.status().message();
    return out ? *out : std::vector<float>{};
  }
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int64_t n) {
    runtime::SequenceRunner r(*executor_, *cache_, vocab());
    auto out = r.greedy(prompt, n);
    EXPECT_TRUE(out) << out.status().message();
    return out ? *out : std::vector<int32_t>{};
  }

 private:
  std::string path_;
  std::unique_ptr<runtime::LoadedModel> model_;
  std::unique_ptr<runtime::Backend> backend_;
  CudaBackend* gpu_ = nullptr;
  std::unique_ptr<runtime::Executor> executor_;
  std::unique_ptr<runtime::KvCache> cache_;
};

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return m;
}

class CudaGoldenTest : public ::testing::TestWithParam<std::string> {};

// fp32: the CPU engines' bar (1e-4 of the largest reference logit, every greedy token).
TEST_P(CudaGoldenTest, Fp32MatchesReferenceLogitsAndGreedy) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  Engine e(name, ir::WeightFormat::kF32, /*cuda=*/true);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.model().file().header().target, kCudaTarget);
  for (size_t i = 0; i < g["prompts"].size(); ++i) {
    const auto prompt = g["prompts"][i].get<std::vector<int32_t>>();
    const auto ref = ::kiln::testing::npy_read_f32((kData / name / g["logits"][i].get<std::string>()).string());
    const std::vector<float> got = e.logits(prompt);
    EXPECT_LE(max_diff(got, ref.data), 1e-4 * max_abs(ref.data)) << name << " prompt " << i;
  }
  for (const auto& entry : g["greedy"]) {
    const auto prompt = entry["prompt"].get<std::vector<int32_t>>();
    const auto want = entry["continuation"].get<std::vector<int32_t>>();
    EXPECT_EQ(e.greedy(prompt, static_cast<int64_t>(want.size())), want) << name << " greedy, " << prompt.size()
                                                                         << "-token prompt";
  }
}

// fp16 and bf16 engines built without timing keep fp32 activations, so they compute what the
// CPU engine of the same weights computes, up to summation order; fp16 greedy paths are equal.
TEST_P(CudaGoldenTest, HalfPrecisionMatchesCpuEngine) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  for (ir::WeightFormat f : {ir::WeightFormat::kF16, ir::WeightFormat::kBF16}) {
    Engine gpu(name, f, true), cpu(name, f, false);
    ASSERT_TRUE(gpu.ok() && cpu.ok());
    const auto prompt = g["prompts"].back().get<std::vector<int32_t>>();
    const std::vector<float> want = cpu.logits(prompt);
    EXPECT_LE(max_diff(gpu.logits(prompt), want), 1e-4 * max_abs(want)) << name << " " << ir::weight_format_name(f);
    if (f != ir::WeightFormat::kF16) continue;
    for (const auto& entry : g["greedy"]) {
      const auto p = entry["prompt"].get<std::vector<int32_t>>();
      EXPECT_EQ(gpu.greedy(p, 12), cpu.greedy(p, 12)) << name << " fp16 greedy, " << p.size() << "-token prompt";
    }
  }
}

// Integer and fp8 weights on the GPU, read as the CPU stores them (decode: widened in the GEMV's
// registers; prefill in an untimed build: widened to fp32 for SGEMM), compute what an fp32 CPU
// engine over the same quantised values computes, up to summation order; greedy paths are equal.
TEST_P(CudaGoldenTest, QuantisedWeightsMatchCpuEngineOfTheSameValues) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  const auto f32 = runtime::KvCacheDtype::kF32;
  for (ir::WeightFormat f : {ir::WeightFormat::kI8Channel, ir::WeightFormat::kI4Group32, ir::WeightFormat::kF8E4M3}) {
    Engine gpu(name, f, true), cpu(name, f, false, false, f32, /*simulate=*/true);
    ASSERT_TRUE(gpu.ok() && cpu.ok());
    for (size_t i = 0; i < g["prompts"].size(); ++i) {
      const auto prompt = g["prompts"][i].get<std::vector<int32_t>>();
      const std::vector<float> want = cpu.logits(prompt);
      EXPECT_LE(max_diff(gpu.logits(prompt), want), 1e-4 * max_abs(want))
          << name << " " << ir::weight_format_name(f) << " prompt " << i;
    }
    for (const auto& entry : g["greedy"]) {
      const auto p = entry["prompt"].get<std::vector<int32_t>>();
      EXPECT_EQ(gpu.greedy(p, 12), cpu.greedy(p, 12))
          << name << " " << ir::weight_format_name(f) << " greedy, " << p.size() << "-token prompt";
    }
  }
}

// A bf16 KV cache on both: keys and values that the GPU and the CPU compute a rounding error
// apart can round to neighbouring bf16 values (2^-8 apart), so the logits agree to 1e-3 of the
// largest rather than the fp32 caches' 1e-4; greedy paths are equal.
TEST_P(CudaGoldenTest, Bf16KvCacheMatchesCpuBf16Cache) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  const auto bf16 = runtime::KvCacheDtype::kBF16;
  Engine gpu(name, ir::WeightFormat::kF32, true, false, bf16), cpu(name, ir::WeightFormat::kF32, false, false, bf16);
  ASSERT_TRUE(gpu.ok() && cpu.ok());
  for (size_t i = 0; i < g["prompts"].size(); ++i) {
    const auto prompt = g["prompts"][i].get<std::vector<int32_t>>();
    const std::vector<float> want = cpu.logits(prompt);
    EXPECT_LE(max_diff(gpu.logits(prompt), want), 1e-3 * max_abs(want)) << name << " prompt " << i;
  }
  for (const auto& entry : g["greedy"]) {
    const auto p = entry["prompt"].get<std::vector<int32_t>>();
    EXPECT_EQ(gpu.greedy(p, 12), cpu.greedy(p, 12)) << name << " bf16 cache greedy, " << p.size() << "-token prompt";
  }
}

// An fp8 (e4m3) KV cache on both: the same rounding of keys and values on both sides, so they
// differ only where a key or value the two compute a rounding error apart lies at a rounding
// boundary (rarer than for bf16, whose steps are 16 times finer, but each such element then moves
// by up to 2^-4 of its value); greedy paths are equal.
TEST_P(CudaGoldenTest, Fp8KvCacheMatchesCpuFp8Cache) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  const auto fp8 = runtime::KvCacheDtype::kFP8;
  Engine gpu(name, ir::WeightFormat::kF32, true, false, fp8), cpu(name, ir::WeightFormat::kF32, false, false, fp8);
  ASSERT_TRUE(gpu.ok() && cpu.ok());
  for (size_t i = 0; i < g["prompts"].size(); ++i) {
    const auto prompt = g["prompts"][i].get<std::vector<int32_t>>();
    const std::vector<float> want = cpu.logits(prompt);
    const double rel = max_diff(gpu.logits(prompt), want) / max_abs(want);
    EXPECT_LE(rel, 2e-2) << name << " prompt " << i;
    std::printf("[ %-26s fp8 KV ] GPU vs CPU, prompt %zu: %.1e of the largest logit\n", name.c_str(), i, rel);
  }
  for (const auto& entry : g["greedy"]) {
    const auto p = entry["prompt"].get<std::vector<int32_t>>();
    EXPECT_EQ(gpu.greedy(p, 12), cpu.greedy(p, 12)) << name << " fp8 cache greedy, " << p.size() << "-token prompt";
  }
}

// Timed builds take the fastest kernels, which round activations to fp16 / bf16 for prefill,
// a second rounding of the same size as the weights': within twice the bounds the CPU's golden
// test allows for the weights' rounding alone (fp16 4e-3 and bf16 4e-2 of the largest logit),
// and top-1 agreement of 90% and 85%. fp8 weights (3 mantissa bits, one scale a weight) and e4m3
// activations in prefill products: these small models' logits move by 9e-2 to 3.2e-1 of the largest
// and 30 to 41 of 45 top-1 choices hold (H200, timed builds differing in their kernel choices);
// the bounds catch a product that is wrong rather than coarse.
TEST_P(CudaGoldenTest, TimedHalfPrecisionStaysWithinTolerance) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  const auto prompt = g["prompts"].back().get<std::vector<int32_t>>();
  const auto ref = ::kiln::testing::npy_read_f32((kData / name / g["logits"].back().get<std::string>()).string());
  const double scale = max_abs(ref.data);
  const struct {
    ir::WeightFormat f;
    double max_rel, top1;
  } tolerances[] = {{ir::WeightFormat::kF16, 8e-3, 0.9}, {ir::WeightFormat::kBF16, 8e-2, 0.85},
                    {ir::WeightFormat::kF8E4M3, 0.45, 0.6}};
  auto check = [&](Engine& e, ir::WeightFormat f, double max_rel, double top1, const char* cache) {
    const std::vector<float> got = e.logits(prompt);
    ASSERT_EQ(got.size(), ref.data.size());
    int agree = 0;
    const auto rows = static_cast<int64_t>(prompt.size());
    for (int64_t r = 0; r < rows; ++r) {
      std::span<const float> a(got.data() + r * e.vocab(), static_cast<size_t>(e.vocab()));
      std::span<const float> b(ref.data.data() + r * e.vocab(), static_cast<size_t>(e.vocab()));
      agree += runtime::argmax(a) == runtime::argmax(b);
    }
    const double rel = max_diff(got, ref.data) / scale;
    const std::string what = name + " " + std::string(ir::weight_format_name(f)) + ", " + cache + " KV cache";
    EXPECT_LE(rel, max_rel) << what;
    EXPECT_GE(static_cast<double>(agree) / static_cast<double>(rows), top1) << what;
    std::printf("[ %-26s %-5s timed, %-4s KV ] vs reference %.1e, top-1 %d/%lld\n", name.c_str(),
                std::string(ir::weight_format_name(f)).c_str(), cache, rel, agree, static_cast<long long>(rows));
  };
  for (const auto& tol : tolerances) {
    Engine e(name, tol.f, true, /*timed=*/true);
    ASSERT_TRUE(e.ok());
    EXPECT_FALSE(e.model().metadata()["build"].value("device", "").empty()) << "the GPU's name is recorded";
    check(e, tol.f, tol.max_rel, tol.top1, "fp32");
    if (tol.f == ir::WeightFormat::kF8E4M3) continue;
    // Over a bf16 cache, prefill steps hand the q/k/v product over in 16 bits (qkv_in_16_bits)
    // and the cache rounds keys and values to bf16: within the bf16 weights' bounds.
    Engine b(name, tol.f, true, /*timed=*/true, runtime::KvCacheDtype::kBF16);
    ASSERT_TRUE(b.ok());
    check(b, tol.f, std::max(tol.max_rel, 8e-2), std::min(tol.top1, 0.85), "bf16");
    if (tol.f != ir::WeightFormat::kF16) continue;
    // An fp8 cache rounds keys and values to 3 mantissa bits: the fp8 weights' bounds, which
    // catch a wrong kernel rather than a coarse one.
    Engine e8(name, tol.f, true, /*timed=*/true, runtime::KvCacheDtype::kFP8);
    ASSERT_TRUE(e8.ok());
    check(e8, tol.f, 0.45, 0.6, "fp8");
  }
}

// Chunked prefill, one token a step (decode through captured graphs) and a ragged batch give
// the logits of one full pass, within fp32 summation-order noise.
TEST_P(CudaGoldenTest, StepSplitsBatchingAndGraphsAgree) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  Engine e(name, ir::WeightFormat::kF32, true);
  ASSERT_TRUE(e.ok());
  const auto prompt = g["prompts"].back().get<std::vector<int32_t>>();
  const std::vector<float> full = e.logits(prompt);
  const double tol = 2e-5 * max_abs(full);
  std::ifstream cfg_in(kData / name / "config.json");
  const bool dynamic = nlohmann::json::parse(cfg_in).dump().find("\"dynamic\"") != std::string::npos;
  if (!dynamic) {
    EXPECT_LE(max_diff(e.logits(prompt, 7), full), tol) << name << " in chunks of 7";
    const int64_t replays = e.gpu()->graph_replays();
    EXPECT_LE(max_diff(e.logits(prompt, 1), full), tol) << name << " one token a step";
    EXPECT_GT(e.gpu()->graph_replays(), replays) << "decode steps replay captured graphs";
  }
  // Graph replay and eager launches run the same kernels on the same data: identical bits.
  const auto with_graphs = e.greedy(prompt, 6);
  const std::vector<float> graph_logits = e.logits(std::vector<int32_t>(prompt.begin(), prompt.begin() + 3), 1);
  e.gpu()->set_graphs_enabled(false);
  EXPECT_EQ(e.greedy(prompt, 6), with_graphs);
  EXPECT_EQ(e.logits(std::vector<int32_t>(prompt.begin(), prompt.begin() + 3), 1), graph_logits);
  e.gpu()->set_graphs_enabled(true);

  std::vector<std::vector<int32_t>> seqs;
  for (const auto& p : g["prompts"]) seqs.push_back(p.get<std::vector<int32_t>>());
  seqs.resize(3);
  std::vector<std::vector<int32_t>> tables(3);
  std::vector<runtime::SequenceStep> steps(3);
  for (size_t s = 0; s < 3; ++s) {
    ASSERT_TRUE(e.cache().kv_cache_reserve(tables[s], static_cast<int64_t>(seqs[s].size())));
    steps[s].tokens = seqs[s];
    steps[s].block_table = tables[s];
    steps[s].all_logits = true;
  }
  auto step = e.executor().step(steps, e.cache());
  ASSERT_TRUE(step) << step.status().message();
  const std::vector<float> batched(step->begin(), step->end());
  size_t offset = 0;
  for (size_t s = 0; s < 3; ++s) {
    const std::vector<float> alone = e.logits(seqs[s]);
    const std::vector<float> part(batched.begin() + static_cast<long>(offset),
                                  batched.begin() + static_cast<long>(offset + alone.size()));
    EXPECT_LE(max_diff(part, alone), tol) << name << " sequence " << s << " in a batch";
    offset += alone.size();
  }
  for (auto& t : tables) e.cache().kv_cache_free(t);
}

// Sampled steps (prefill, then decode steps that replay a graph) choose on the GPU what device
// sampling's host reference chooses from the same steps' logits, and return the logits of the
// rows the caller asks for.
TEST_P(CudaGoldenTest, SampledStepsChooseWhatTheReferenceChoosesFromTheLogits) {
  KILN_REQUIRE_GPU();
  const std::string name = GetParam();
  const nlohmann::json g = load_golden(name);
  Engine e(name, ir::WeightFormat::kF32, true);
  ASSERT_TRUE(e.ok());
  std::vector<std::vector<int32_t>> seqs;
  for (const auto& p : g["prompts"]) seqs.push_back(p.get<std::vector<int32_t>>());
  seqs.resize(3);
  runtime::SamplingBatch batch;
  // The greedy row is masked (structured outputs): only every third token may be chosen.
  std::vector<uint64_t> every_third(static_cast<size_t>((e.vocab() + 63) / 64));
  for (int64_t t = 0; t < e.vocab(); t += 3) every_third[static_cast<size_t>(t / 64)] |= uint64_t{1} << (t % 64);
  batch.set_mask(batch.add_row(), every_third);
  runtime::RowSampling& nucleus = batch.add_row();
  nucleus.temperature = 0.8f;
  nucleus.top_p = 0.9f;
  runtime::RowSampling& penalised = batch.add_row();
  penalised.temperature = 1.3f;
  penalised.top_k = 5;
  penalised.repetition_penalty = 1.2f;
  for (int32_t t : seqs[2]) {
    batch.penalty_tokens.push_back(t);
    batch.penalty_counts.push_back(1);
    ++penalised.penalty_count;
  }
  batch.host_rows = {1};
  std::sort(batch.penalty_tokens.begin(), batch.penalty_tokens.end());  // distinct, as the Sampler sends them
  batch.penalty_tokens.erase(std::unique(batch.penalty_tokens.begin(), batch.penalty_tokens.end()),
                             batch.penalty_tokens.end());
  batch.penalty_counts.resize(batch.penalty_tokens.size());
  penalised.penalty_count = static_cast<int32_t>(batch.penalty_tokens.size());

  std::vector<std::vector<int32_t>> tables(3), tokens = seqs;
  std::vector<int64_t> context(3, 0);
  const int64_t replays = e.gpu()->graph_replays();
  for (int round = 0; round < 4; ++round) {
    std::vector<runtime::SequenceStep> steps(3);
    for (size_t s = 0; s < 3; ++s) {
      ASSERT_TRUE(e.cache().kv_cache_reserve(tables[s], context[s] + static_cast<int64_t>(tokens[s].size())));
      steps[s].tokens = tokens[s];
      steps[s].context_len = context[s];
      steps[s].block_table = tables[s];
    }
    auto logits = e.executor().step(steps, e.cache());
    ASSERT_TRUE(logits) << logits.status().message();
    const std::vector<float> rows(logits->begin(), logits->end());
    for (size_t r = 0; r < 3; ++r) batch.rows[r].uniform = std::fmod(0.1 + 0.27 * static_cast<double>(r + 3 * round), 1.0);
    auto out = e.executor().step_sampled(steps, e.cache(), batch);
    ASSERT_TRUE(out) << out.status().message();
    for (size_t r = 0; r < 3; ++r) {
      std::vector<float> row(rows.begin() + static_cast<long>(r * e.vocab()),
                             rows.begin() + static_cast<long>((r + 1) * e.vocab()));
      if (r == 1) {
        EXPECT_EQ(std::vector<float>(out->logits.begin(), out->logits.end()), row) << name << " round " << round;
      }
      EXPECT_EQ(out->ids[r], runtime::sample_row(row, batch, r)) << name << " round " << round << " row " << r;
    }
    EXPECT_EQ(out->ids[0] % 3, 0) << "the masked row's token is one its mask allows";
    for (size_t s = 0; s < 3; ++s) {
      context[s] += static_cast<int64_t>(tokens[s].size());
      tokens[s] = {out->ids[s]};
    }
  }
  EXPECT_GT(e.gpu()->graph_replays(), replays);
  for (auto& t : tables) e.cache().kv_cache_free(t);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaGoldenTest, ::testing::ValuesIn(case_names()),
                         [](const auto& param_info) { return param_info.param; });

// Needs no GPU: a cuda engine built untimed records its target and row-format weights with the
// CUDA kernels' names, and the CPU backend refuses it.
TEST(CudaTargets, CudaEngineIsPackedForTheGpuAndRefusedByTheCpu) {
  const std::string cuda_path = build("llama_gqa", ir::WeightFormat::kF16, true);
  auto cuda_model = runtime::LoadedModel::load(cuda_path);
  ASSERT_TRUE(cuda_model) << cuda_model.status().message();
  EXPECT_EQ(cuda_model->get()->file().header().target, kCudaTarget);
  for (const auto& node : cuda_model->get()->graph().nodes()) {
    if (node.op != "matmul") continue;
    EXPECT_NE(node.attr_str("kernel_decode").find(".cuda.gemv"), std::string::npos) << node.name;
    EXPECT_NE(node.attr_str("kernel_prefill").find(".cuda.gemm_split"), std::string::npos) << node.name;
    EXPECT_FALSE(ir::weight_format_is_panel(cuda_model->get()->graph().weight(node.inputs[1]).format));
  }
  cpu::CpuBackend cpu_backend;
  Status refused = cpu_backend.check_target(kCudaTarget);
  EXPECT_FALSE(refused);
  EXPECT_NE(refused.message().find("kiln build"), std::string::npos) << refused.message();
  fs::remove(cuda_path);
}

TEST(CudaTargets, CpuEngineIsRefusedByTheCudaBackend) {
  KILN_REQUIRE_GPU();
  cpu::CpuBackend cpu_backend;
  auto gpu = CudaBackend::create(0);
  ASSERT_TRUE(gpu) << gpu.status().message();
  Status st = (*gpu)->check_target(cpu_backend.target());
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("--target cuda"), std::string::npos) << st.message();
  EXPECT_TRUE((*gpu)->check_target(kCudaTarget)) << "this GPU runs cuda-sm90 engines";
}

}  // namespace
}  // namespace kiln::cuda
