// The serving loop on a real model: the bundled demo Llama (models/demo), built once per test
// process into a temporary engine file (f32, no autotuning) and run on the CPU backend. The
// checks are invariances: many requests at once give what each gives alone; the prefix cache
// and preemption change nothing in the output; the same seed gives the same text.
#include "llm/serving/serving_loop.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_tuner.h"
#include "engine/engine_builder.h"
#include "llm/generation/generator.h"
#include "llm/structured/grammar_cache.h"
#include "llm/structured/grammar_matcher.h"
#include "runtime/sequence_runner.h"
#include "unit/llm/serving/serving_test_support.h"

namespace kiln::llm {
namespace {

namespace fs = std::filesystem;

// A CPU backend that says it samples on its device: its run_step_sampled() is the Backend
// default (device sampling's host reference), so the serving loop and the generator take the
// path they take on a GPU.
class DeviceSamplingCpuBackend final : public runtime::Backend {
 public:
  std::string target() const override { return cpu_.target(); }
  Status check_target(const std::string& t) const override { return cpu_.check_target(t); }
  Status prepare(const runtime::LoadedModel& m, int64_t n) override { return cpu_.prepare(m, n); }
  Expected<std::unique_ptr<runtime::DeviceBuffer>> allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  bool supports_kv_cache_dtype(runtime::KvCacheDtype d) const override { return cpu_.supports_kv_cache_dtype(d); }
  Expected<std::span<const float>> run_step(const runtime::StepView& step) override { return cpu_.run_step(step); }
  bool samples_on_device() const override { return true; }
  Expected<runtime::SampledStep> run_step_sampled(const runtime::StepView& step,
                                                  const runtime::SamplingBatch& sampling) override {
    ++sampled_steps;
    host_rows += static_cast<int64_t>(sampling.host_rows.size());
    return Backend::run_step_sampled(step, sampling);
  }
  std::atomic<int64_t> sampled_steps{0}, host_rows{0};

 private:
  cpu::CpuBackend cpu_;
};

// The demo model, loaded once per process; tests take turns with its executor.
class Demo {
 public:
  static Demo& get() {
    static Demo demo;
    return demo;
  }
  bool ok() const { return executor_ != nullptr && tokenizer_ != nullptr; }
  const std::string& error() const { return error_; }
  runtime::Executor& executor() { return *executor_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t vocab() const { return model_->facts().vocab_size; }
  std::vector<int32_t> eos() const { return {*tokenizer_->eos_id()}; }

  std::vector<int32_t> encode(const std::string& text) const {
    auto ids = tokenizer_->encode(text, true);
    EXPECT_TRUE(ids) << ids.status().message();
    return ids ? *ids : std::vector<int32_t>{};
  }

  // The same model on DeviceSamplingCpuBackend, made on first use.
  runtime::Executor& device_sampling_executor() {
    if (device_sampling_executor_ == nullptr) {
      auto ex = runtime::Executor::create(*model_, device_sampling_backend_);
      EXPECT_TRUE(ex) << ex.status().message();
      if (ex) device_sampling_executor_ = std::move(*ex);
    }
    return *device_sampling_executor_;
  }
  int64_t device_sampled_steps() const { return device_sampling_backend_.sampled_steps; }
  int64_t device_sampling_host_rows() const { return device_sampling_backend_.host_rows; }

  // One sequence alone through Generator, on a cache of its own: the reference.
  GenerationResult alone(const std::vector<int32_t>& prompt, const SamplingParams& params,
                         runtime::Executor* executor = nullptr) {
    if (executor == nullptr) executor = executor_.get();
    runtime::KvCache cache(executor->kv_cache_spec(64, 16));
    Generator gen(*executor, cache, *tokenizer_, vocab());
    auto r = gen.generate(prompt, params, eos(), nullptr);
    EXPECT_TRUE(r) << r.status().message();
    return r ? *r : GenerationResult{};
  }

  ~Demo() {
    if (!path_.empty()) fs::remove(path_);
  }

 private:
  Demo() {
    // One thread on both the test's thread and the loop's: no OpenMP team spinning at
    // barriers on a loaded machine.
    cpu::cpu_set_threads(1);
    path_ = (fs::temp_directory_path() / ("kiln_serving_demo_" + std::to_string(getpid()) + ".kiln")).string();
    cpu::CpuKernelTuner tuner(cpu::isa_active());
    engine::EngineBuildRequest req;
    req.model_dir = std::string(KILN_SOURCE_DIR) + "/models/demo";
    req.output_path = path_;
    req.options.matmul_format = ir::WeightFormat::kF32;
    req.options.max_batch_tokens = 256;
    req.options.autotune = false;
    engine::EngineBuildHooks hooks;
    hooks.tuner = &tuner;
    if (Status st = engine::build_engine(req, hooks); !st) {
      error_ = st.message();
      return;
    }
    auto model = runtime::LoadedModel::load(path_);
    if (!model) {
      error_ = model.status().message();
      return;
    }
    model_ = std::move(*model);
    auto ex = runtime::Executor::create(*model_, backend_);
    if (!ex) {
      error_ = ex.status().message();
      return;
    }
    auto tok = tokenizer_from_files(model_->files());
    if (!tok) {
      error_ = tok.status().message();
      return;
    }
    executor_ = std::move(*ex);
    tokenizer_ = std::move(*tok);
  }

  std::string path_, error_;
  std::unique_ptr<runtime::LoadedModel> model_;
  cpu::CpuBackend backend_;
  std::unique_ptr<runtime::Executor> executor_;
  DeviceSamplingCpuBackend device_sampling_backend_;
  std::unique_ptr<runtime::Executor> device_sampling_executor_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// Everything one request produced.
struct Outcome {
  std::vector<std::string> text;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<TokenInfo>> infos;  // each token with its logprobs, when asked
  std::vector<FinishReason> finish;
  std::vector<TokenInfo> prompt_logprobs;
  RequestUsage usage;
  std::string error;
  bool finished = false;
  int deltas = 0;
};

void absorb(Outcome& o, std::vector<RequestEvent>& events) {
  for (RequestEvent& e : events) {
    switch (e.kind) {
      case RequestEvent::Kind::kPromptLogprobs:
        EXPECT_EQ(o.deltas, 0) << "prompt logprobs after a delta";
        o.prompt_logprobs = std::move(e.tokens);
        break;
      case RequestEvent::Kind::kDelta: {
        const auto c = static_cast<size_t>(e.choice);
        if (o.text.size() <= c) {
          o.text.resize(c + 1);
          o.tokens.resize(c + 1);
          o.infos.resize(c + 1);
          o.finish.resize(c + 1, FinishReason::kNone);
        }
        EXPECT_EQ(o.finish[c], FinishReason::kNone) << "a delta after the choice's last";
        o.text[c] += e.text;
        for (const TokenInfo& t : e.tokens) {
          o.tokens[c].push_back(t.token);
          o.infos[c].push_back(t);
        }
        o.finish[c] = e.finish;
        ++o.deltas;
        break;
      }
      case RequestEvent::Kind::kFinished:
        o.usage = e.usage;
        o.finished = true;
        EXPECT_GE(e.first_token_s, e.queue_s);
        break;
      case RequestEvent::Kind::kError:
        o.error = e.error;
        break;
    }
  }
  events.clear();
}

// Waits for the stream to complete (a minute at most, so that a bug fails instead of hanging).
Outcome collect(ResponseStream& stream) {
  Outcome o;
  std::vector<RequestEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    const bool done = stream.pop_all(events);
    absorb(o, events);
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "the request did not complete";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return o;
}

// Waits until `pred` holds for the loop's stats.
template <typename Pred>
bool wait_for_stats(const ServingLoop& loop, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(loop.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

using testing::greedy;

GenerationRequest make_request(std::vector<int32_t> prompt, SamplingParams params) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params = std::move(params);
  r.skip_special_tokens = false;  // as Generator decodes
  return r;
}

const std::vector<std::string> kTexts = {
    "It is a truth universally",
    "Sherlock Holmes took",
    "In the beginning God created",
    "Call me Ishmael.",
    "Mr. Darcy walked",
    "And the LORD said unto Moses,",
    "The whale",
    "\"My dear Watson,\" said he,",
    "Elizabeth could not help",
    "Then the captain of the ship",
    "She was",
    "It was a dark and stormy night, and the wind",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home",
    "Blessed are the",
    "I have no doubt that",
    "Upon my word,",
};

class ServingLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Demo& demo = Demo::get();
    ASSERT_TRUE(demo.ok()) << demo.error();
  }
  Demo& demo() { return Demo::get(); }

  std::unique_ptr<ServingLoop> make_loop(ServingOptions options, runtime::Executor* executor = nullptr) {
    if (executor == nullptr) executor = &demo().executor();
    options.on_loop_thread_start = [] { cpu::cpu_set_threads(1); };
    // 128 blocks (8 full-length sequences) rather than the default's 2048: quicker to set up.
    if (options.kv_cache_bytes == 0) options.kv_cache_bytes = 128 * executor->kv_cache_spec(1, 16).bytes();
    auto e = ServingLoop::create(*executor, demo().tokenizer(), demo().eos(), options);
    EXPECT_TRUE(e) << e.status().message();
    return e ? std::move(*e) : nullptr;
  }
};

TEST_F(ServingLoopTest, ConcurrentGreedyEqualsEachAlone) {
  std::vector<GenerationResult> expected;
  for (const std::string& t : kTexts) expected.push_back(demo().alone(demo().encode(t), greedy(24)));

  auto loop = make_loop({});
  ASSERT_NE(loop, nullptr);
  std::vector<std::shared_ptr<ResponseStream>> streams;
  for (const std::string& t : kTexts) {
    auto s = loop->submit(make_request(demo().encode(t), greedy(24)));
    ASSERT_TRUE(s) << s.status().message();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    const Outcome o = collect(*streams[i]);
    ASSERT_TRUE(o.finished) << o.error;
    ASSERT_EQ(o.text.size(), 1u);
    EXPECT_EQ(o.tokens[0], expected[i].tokens) << kTexts[i];
    EXPECT_EQ(o.text[0], expected[i].text) << kTexts[i];
    EXPECT_EQ(o.finish[0], expected[i].finish);
    EXPECT_EQ(o.usage.prompt_tokens, expected[i].prompt_tokens);
    EXPECT_EQ(o.usage.completion_tokens, static_cast<int64_t>(expected[i].tokens.size()));
  }
  const ServingStats st = loop->stats();
  EXPECT_EQ(st.requests_finished, static_cast<int64_t>(kTexts.size()));
  EXPECT_GT(st.steps, 0);
  EXPECT_GT(st.generated_tokens, 0);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  // Decode steps: those with no prompt token. The first steps compute prompts; each row of a
  // decode step is a generated token fed back, and a request's first token comes from its prompt.
  const auto requests = static_cast<int64_t>(kTexts.size());
  EXPECT_GT(st.decode_steps, 0);
  EXPECT_LT(st.decode_steps, st.steps);
  EXPECT_GE(st.decode_rows, st.decode_steps);
  EXPECT_LE(st.decode_rows, st.generated_tokens - requests);
  EXPECT_LE(st.decode_rows, st.decode_steps * requests);
  EXPECT_GT(st.decode_step_seconds, 0.0);
  EXPECT_LT(st.decode_step_seconds, st.step_seconds);
}

TEST_F(ServingLoopTest, SameSeedSameText) {
  auto loop = make_loop({});
  ASSERT_NE(loop, nullptr);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.max_tokens = 32;
  p.ignore_eos = true;
  p.seed = 42;
  SamplingParams other = p;
  other.seed = 43;
  const auto prompt = demo().encode(kTexts[0]);
  auto a = loop->submit(make_request(prompt, p));
  auto noise = loop->submit(make_request(demo().encode(kTexts[1]), p));
  auto b = loop->submit(make_request(prompt, p));
  auto c = loop->submit(make_request(prompt, other));
  ASSERT_TRUE(a && b && c && noise);
  const Outcome oa = collect(**a), ob = collect(**b), oc = collect(**c);
  collect(**noise);
  ASSERT_TRUE(oa.finished && ob.finished && oc.finished);
  EXPECT_EQ(oa.text[0], ob.text[0]);
  EXPECT_EQ(oa.tokens[0], ob.tokens[0]);
  EXPECT_NE(oa.tokens[0], oc.tokens[0]);
  EXPECT_EQ(oa.finish[0], FinishReason::kLength);
  // The same seed alone gives the same text as in the batch.
  loop.reset();
  EXPECT_EQ(demo().alone(prompt, p).text, oa.text[0]);
}

// Enough seeded, sampled requests at once (40 rows of the demo's 8,192 logits) that the loop
// samples their rows on several threads: each still draws what it draws alone (its own sampler,
// its own seed).
TEST_F(ServingLoopTest, ManySeededRequestsAtOnceEachDrawWhatItDrawsAlone) {
  constexpr size_t kRequests = 40;
  auto loop = make_loop({});
  ASSERT_NE(loop, nullptr);
  std::vector<SamplingParams> params;
  std::vector<std::shared_ptr<ResponseStream>> streams;
  for (size_t i = 0; i < kRequests; ++i) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.max_tokens = 12;
    p.ignore_eos = true;
    p.seed = 100 + i;
    p.logprobs = i % 2 == 0 ? 2 : -1;
    params.push_back(p);
    auto s = loop->submit(make_request(demo().encode(kTexts[i % kTexts.size()]), p));
    ASSERT_TRUE(s) << s.status().message();
    streams.push_back(*s);
  }
  std::vector<Outcome> got;
  for (auto& s : streams) got.push_back(collect(*s));
  loop.reset();
  for (size_t i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(got[i].finished) << got[i].error;
    const GenerationResult alone = demo().alone(demo().encode(kTexts[i % kTexts.size()]), params[i]);
    EXPECT_EQ(got[i].tokens[0], alone.tokens) << i;
    EXPECT_EQ(got[i].text[0], alone.text) << i;
  }
}

// 8 requests sharing a long prefix: the first alone, then the rest together.
std::vector<Outcome> run_shared_prefix(ServingLoop& loop, Demo& demo) {
  std::string prefix = kTexts[12];
  for (int i = 0; i < 4; ++i) prefix += " " + kTexts[static_cast<size_t>(i)];
  std::vector<Outcome> out;
  auto first = loop.submit(make_request(demo.encode(prefix + " and"), greedy(16)));
  EXPECT_TRUE(first);
  if (!first) return out;
  out.push_back(collect(**first));
  std::vector<std::shared_ptr<ResponseStream>> streams;
  for (size_t i = 1; i < 8; ++i) {
    auto s = loop.submit(make_request(demo.encode(prefix + " " + kTexts[i + 3]), greedy(16)));
    EXPECT_TRUE(s);
    if (s) streams.push_back(*s);
  }
  for (auto& s : streams) out.push_back(collect(*s));
  return out;
}

// On a backend that samples on its device, greedy requests (with bias and penalties too) give
// the host sampler's tokens, and a request with logprobs still gets them: its row's logits come
// back with the step's ids, and its Sampler samples them here.
TEST_F(ServingLoopTest, DeviceSamplingKeepsGreedyTokensAndLogprobs) {
  std::vector<SamplingParams> params(6, greedy(24));
  params[1].repetition_penalty = 1.3f;
  params[2].presence_penalty = 1.5f;
  params[2].frequency_penalty = 0.5f;
  params[3].logit_bias = {{demo().encode("the").back(), 3.0f}};
  params[4].logprobs = 2;
  params[4].max_tokens = 4;
  auto loop = make_loop({}, &demo().device_sampling_executor());
  ASSERT_NE(loop, nullptr);
  const int64_t before = demo().device_sampled_steps();
  const int64_t host_rows_before = demo().device_sampling_host_rows();
  std::vector<std::shared_ptr<ResponseStream>> streams;
  for (size_t i = 0; i < params.size(); ++i) {
    auto s = loop->submit(make_request(demo().encode(kTexts[i]), params[i]));
    ASSERT_TRUE(s) << s.status().message();
    streams.push_back(*s);
  }
  std::vector<Outcome> outcomes;
  for (const auto& s : streams) outcomes.push_back(collect(*s));
  loop.reset();  // the references below take their turn with the model
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    ASSERT_TRUE(o.finished) << o.error;
    const GenerationResult expected = demo().alone(demo().encode(kTexts[i]), params[i]);
    EXPECT_EQ(o.tokens[0], expected.tokens) << kTexts[i];
    EXPECT_EQ(o.text[0], expected.text) << kTexts[i];
  }
  EXPECT_GT(demo().device_sampled_steps(), before);
  EXPECT_EQ(demo().device_sampling_host_rows() - host_rows_before, 4) << "one host row a token of the logprobs request";

  // The logprobs are those of the host path, to the bit.
  const std::vector<TokenInfo>& logprobs_seen = outcomes[4].infos[0];
  auto host_loop = make_loop({});
  ASSERT_NE(host_loop, nullptr);
  auto on_host = host_loop->submit(make_request(demo().encode(kTexts[4]), params[4]));
  ASSERT_TRUE(on_host);
  const Outcome expected = collect(**on_host);
  ASSERT_EQ(expected.infos[0].size(), 4u);
  ASSERT_EQ(logprobs_seen.size(), 4u);
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_TRUE(logprobs_seen[t].logprob.has_value());
    EXPECT_EQ(logprobs_seen[t].logprob, expected.infos[0][t].logprob) << t;
    ASSERT_EQ(logprobs_seen[t].top.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(logprobs_seen[t].top[k].token, expected.infos[0][t].top[k].token);
      EXPECT_EQ(logprobs_seen[t].top[k].logprob, expected.infos[0][t].top[k].logprob);
    }
  }
}

// Device sampling draws each row from the sequence's own seeded generator: the loop's batched
// requests give what kiln run's generator gives each alone on the same backend.
TEST_F(ServingLoopTest, DeviceSamplingSeedsGiveWhatEachGivesAlone) {
  runtime::Executor& device = demo().device_sampling_executor();
  auto loop = make_loop({}, &device);
  ASSERT_NE(loop, nullptr);
  std::vector<SamplingParams> params;
  std::vector<std::shared_ptr<ResponseStream>> streams;
  for (size_t i = 0; i < 6; ++i) {
    SamplingParams p;
    p.temperature = 0.7f + 0.1f * static_cast<float>(i);
    p.top_k = i % 2 == 0 ? 40 : 0;
    p.top_p = i % 3 == 0 ? 0.9f : 1.0f;
    p.min_p = i == 5 ? 0.05f : 0.0f;
    p.presence_penalty = i == 4 ? 0.5f : 0.0f;
    p.max_tokens = 20;
    p.ignore_eos = true;
    p.seed = 100 + i;
    params.push_back(p);
    auto s = loop->submit(make_request(demo().encode(kTexts[i]), p));
    ASSERT_TRUE(s) << s.status().message();
    streams.push_back(*s);
  }
  std::vector<Outcome> outcomes;
  for (const auto& s : streams) outcomes.push_back(collect(*s));
  loop.reset();  // the references below take their turn with the executor
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    ASSERT_TRUE(o.finished) << o.error;
    const GenerationResult alone = demo().alone(demo().encode(kTexts[i]), params[i], &device);
    EXPECT_EQ(o.tokens[0], alone.tokens) << kTexts[i];
    EXPECT_EQ(o.tokens[0].size(), 20u);
  }
}

// Structured outputs on a backend that samples on its device: each row's token mask goes with
// the step, no row comes back to the host, and greedy choices are the host path's.
TEST_F(ServingLoopTest, DeviceSamplingTakesStructuredOutputsMasks) {
  structured::GrammarCache grammars(demo().tokenizer());
  auto g = grammars.get(structured::ConstraintKind::kJsonSchema,
                        R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                            "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                            "required": ["name", "age"], "additionalProperties": false})",
                        "schema");
  ASSERT_TRUE(g.has_value()) << g.status().message();
  auto run = [&](runtime::Executor* executor, float temperature) {
    auto loop = make_loop({}, executor);
    std::vector<std::shared_ptr<ResponseStream>> streams;
    for (size_t i = 0; i < 4; ++i) {
      SamplingParams p = greedy(64);
      p.temperature = temperature;
      p.seed = 7 + i;
      GenerationRequest r = make_request(demo().encode(kTexts[i]), p);
      r.grammar = *g;
      auto s = loop->submit(std::move(r));
      EXPECT_TRUE(s) << s.status().message();
      if (s) streams.push_back(*s);
    }
    std::vector<Outcome> out;
    for (const auto& s : streams) out.push_back(collect(*s));
    return out;
  };
  const int64_t host_rows_before = demo().device_sampling_host_rows();
  const std::vector<Outcome> device_greedy = run(&demo().device_sampling_executor(), 0.0f);
  const std::vector<Outcome> device_sampled = run(&demo().device_sampling_executor(), 1.0f);
  EXPECT_EQ(demo().device_sampling_host_rows(), host_rows_before) << "masked rows are sampled on the device";
  const std::vector<Outcome> host_greedy = run(nullptr, 0.0f);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(device_greedy[i].finished) << device_greedy[i].error;
    EXPECT_EQ(device_greedy[i].tokens[0], host_greedy[i].tokens[0]) << kTexts[i];
    for (const Outcome* o : {&device_greedy[i], &device_sampled[i]}) {
      ASSERT_TRUE(o->finished) << o->error;
      structured::GrammarMatcher m(*g);
      EXPECT_TRUE(m.accept_bytes(o->text[0])) << o->text[0];
      if (o->finish[0] == FinishReason::kStop) {
        EXPECT_TRUE(m.can_end()) << o->text[0];
      }
    }
  }
}

TEST_F(ServingLoopTest, SharedPrefixHitsTheCacheAndChangesNothing) {
  ServingOptions cached;
  ServingOptions uncached;
  uncached.prefix_caching = false;
  std::vector<Outcome> with, without;
  ServingStats stats_with;
  {
    auto loop = make_loop(cached);
    ASSERT_NE(loop, nullptr);
    with = run_shared_prefix(*loop, demo());
    stats_with = loop->stats();
  }
  {
    auto loop = make_loop(uncached);
    ASSERT_NE(loop, nullptr);
    without = run_shared_prefix(*loop, demo());
    EXPECT_EQ(loop->stats().prefix_hits, 0);
  }
  ASSERT_EQ(with.size(), 8u);
  ASSERT_EQ(without.size(), 8u);
  EXPECT_GT(stats_with.prefix_hits, 0);
  EXPECT_GT(stats_with.prefix_queries, stats_with.prefix_hits);
  EXPECT_EQ(with[0].usage.cached_prompt_tokens, 0);
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(with[i].finished && without[i].finished);
    EXPECT_EQ(with[i].text, without[i].text) << i;
    EXPECT_EQ(with[i].tokens, without[i].tokens) << i;
    EXPECT_EQ(without[i].usage.cached_prompt_tokens, 0);
    if (i > 0) {
      EXPECT_GE(with[i].usage.cached_prompt_tokens, 16) << i;
    }
  }
}

TEST_F(ServingLoopTest, PreemptionGivesIdenticalOutputs) {
  std::vector<GenerationResult> expected;
  SamplingParams p = greedy(40);
  p.ignore_eos = true;
  for (size_t i = 0; i < 8; ++i) expected.push_back(demo().alone(demo().encode(kTexts[i]), p));

  ServingOptions o;
  // 8 blocks of 16 positions: each request needs up to 4, eight of them run at once.
  o.kv_cache_bytes = 8 * demo().executor().kv_cache_spec(1, 16).bytes();
  for (const bool caching : {true, false}) {
    o.prefix_caching = caching;
    auto loop = make_loop(o);
    ASSERT_NE(loop, nullptr);
    EXPECT_EQ(loop->stats().kv_blocks_total, 8);
    std::vector<std::shared_ptr<ResponseStream>> streams;
    for (size_t i = 0; i < 8; ++i) {
      auto s = loop->submit(make_request(demo().encode(kTexts[i]), p));
      ASSERT_TRUE(s) << s.status().message();
      streams.push_back(*s);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      const Outcome out = collect(*streams[i]);
      ASSERT_TRUE(out.finished) << out.error;
      EXPECT_EQ(out.tokens[0], expected[i].tokens) << "caching " << caching << ": " << kTexts[i];
      EXPECT_EQ(out.text[0], expected[i].text);
    }
    EXPECT_GT(loop->stats().preemptions, 0) << "caching " << caching;
    EXPECT_EQ(loop->stats().kv_blocks_used, 0);
  }
}

TEST_F(ServingLoopTest, CancellationMidStreamFreesItsBlocks) {
  auto loop = make_loop({});
  ASSERT_NE(loop, nullptr);
  SamplingParams p = greedy(400);
  p.ignore_eos = true;
  auto s = loop->submit(make_request(demo().encode(kTexts[0]), p));
  ASSERT_TRUE(s);
  std::vector<RequestEvent> events;
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (o.deltas < 3 && std::chrono::steady_clock::now() < deadline) {
    (*s)->pop_all(events);
    absorb(o, events);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(o.deltas, 3);
  EXPECT_GT(loop->stats().kv_blocks_used, 0);
  (*s)->cancel();
  EXPECT_TRUE(wait_for_stats(*loop, [](const ServingStats& st) { return st.running == 0 && st.kv_blocks_used == 0; }));
  const Outcome rest = collect(**s);
  EXPECT_FALSE(rest.finished);
  EXPECT_FALSE(rest.error.empty());
  EXPECT_EQ(loop->stats().requests_cancelled, 1);
  EXPECT_EQ(loop->stats().requests_failed, 0);
  // The loop goes on serving.
  auto next = loop->submit(make_request(demo().encode(kTexts[1]), greedy(4)));
  ASSERT_TRUE(next);
  EXPECT_TRUE(collect(**next).finished);
}

TEST_F(ServingLoopTest, ABurstFillsTheFreeSlotsBeforeTheQueue) {
  // Submitted at once, before the loop has taken any of them into a slot: the free sequence
  // slots take max_num_seqs of them and max_queue more may wait.
  ServingOptions o;
  o.max_num_seqs = 8;
  o.max_queue = 2;
  auto loop = make_loop(o);
  ASSERT_NE(loop, nullptr);
  std::vector<std::shared_ptr<ResponseStream>> accepted;
  for (int i = 0; i < 10; ++i) {
    auto s = loop->submit(make_request(demo().encode(kTexts[i % 4]), greedy(4)));
    ASSERT_TRUE(s) << "request " << i << ": " << s.status().message();
    accepted.push_back(*s);
  }
  auto refused = loop->submit(make_request(demo().encode(kTexts[0]), greedy(4)));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  for (auto& s : accepted) EXPECT_TRUE(collect(*s).finished);
  // Once they have ended, their places are free again.
  auto again = loop->submit(make_request(demo().encode(kTexts[1]), greedy(4)));
  ASSERT_TRUE(again);
  EXPECT_TRUE(collect(**again).finished);
}

TEST_F(ServingLoopTest, RefusesAFullQueueAndWhatCanNeverFit) {
  ServingOptions o;
  o.max_num_seqs = 1;
  o.max_queue = 2;
  auto loop = make_loop(o);
  ASSERT_NE(loop, nullptr);
  SamplingParams p = greedy(400);
  p.ignore_eos = true;
  auto running = loop->submit(make_request(demo().encode(kTexts[0]), p));
  ASSERT_TRUE(running);
  // Once it runs, two more can wait behind it, and the next is refused.
  ASSERT_TRUE(wait_for_stats(*loop, [](const ServingStats& st) { return st.running == 1; }));
  auto w1 = loop->submit(make_request(demo().encode(kTexts[1]), greedy(4)));
  auto w2 = loop->submit(make_request(demo().encode(kTexts[2]), greedy(4)));
  ASSERT_TRUE(w1 && w2);
  auto refused = loop->submit(make_request(demo().encode(kTexts[3]), greedy(4)));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);

  const int64_t max_len = loop->max_seq_len();
  auto too_long = loop->submit(make_request(std::vector<int32_t>(static_cast<size_t>(max_len - 3), 5), greedy(4)));
  ASSERT_FALSE(too_long);
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  auto bad_token = loop->submit(make_request({0, static_cast<int32_t>(loop->vocab_size())}, greedy(4)));
  ASSERT_FALSE(bad_token);
  EXPECT_EQ(bad_token.status().code(), StatusCode::kInvalidArgument);
  auto empty = loop->submit(make_request({}, greedy(4)));
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);

  (*running)->cancel();
  EXPECT_TRUE(collect(**w1).finished);
  EXPECT_TRUE(collect(**w2).finished);
}

TEST_F(ServingLoopTest, KvPoolRefusesWhatCouldNeverFit) {
  ServingOptions o;
  o.kv_cache_bytes = 2 * demo().executor().kv_cache_spec(1, 16).bytes();  // 32 positions
  auto loop = make_loop(o);
  ASSERT_NE(loop, nullptr);
  auto big = loop->submit(make_request(demo().encode(kTexts[0]), greedy(40)));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  auto fits = loop->submit(make_request(demo().encode(kTexts[0]), greedy(8)));
  ASSERT_TRUE(fits) << fits.status().message();
  EXPECT_TRUE(collect(**fits).finished);
}

TEST_F(ServingLoopTest, NarrowKvCachesStayCloseToFp32) {
  const auto prompt = demo().encode(kTexts[11] + " " + kTexts[12] + " " + kTexts[3]);
  ASSERT_GT(prompt.size(), 20u);
  const auto v = static_cast<size_t>(demo().vocab());
  auto feed = [&](runtime::KvCacheDtype dtype) {
    runtime::KvCache cache(demo().executor().kv_cache_spec(16, 16, dtype));
    runtime::SequenceRunner runner(demo().executor(), cache, demo().vocab());
    auto r = runner.feed(prompt, true);
    EXPECT_TRUE(r) << r.status().message();
    return r ? std::move(*r) : std::vector<float>();
  };
  const std::vector<float> exact = feed(runtime::KvCacheDtype::kF32);
  // bf16 keeps 8 bits of each key and value, fp8 (e4m3) 4: the logits move by a few per cent of
  // their scale at most, and almost every row keeps its top token.
  const struct {
    runtime::KvCacheDtype dtype;
    float max_rel;
    int blocks;  // in 8 fp32 blocks' bytes
  } narrow[] = {{runtime::KvCacheDtype::kBF16, 0.05f, 16}, {runtime::KvCacheDtype::kFP8, 0.1f, 32}};
  for (const auto& c : narrow) {
    SCOPED_TRACE(std::string(runtime::kv_cache_dtype_name(c.dtype)));
    const std::vector<float> got = feed(c.dtype);
    ASSERT_EQ(got.size(), exact.size());
    size_t same_argmax = 0;
    const size_t n = exact.size() / v;
    for (size_t r = 0; r < n; ++r) {
      const float* a = exact.data() + r * v;
      const float* b = got.data() + r * v;
      float scale = 0.0f, diff = 0.0f;
      for (size_t j = 0; j < v; ++j) {
        scale = std::max(scale, std::fabs(a[j]));
        diff = std::max(diff, std::fabs(a[j] - b[j]));
      }
      EXPECT_LT(diff, c.max_rel * scale) << "row " << r;
      same_argmax += std::max_element(a, a + v) - a == std::max_element(b, b + v) - b;
    }
    EXPECT_GE(same_argmax * 10, n * 9) << same_argmax << " of " << n << " rows pick the same token";

    // The serving loop sizes its pool in the narrower element's blocks and serves from it.
    ServingOptions o;
    o.kv_cache_dtype = c.dtype;
    o.kv_cache_bytes = 8 * demo().executor().kv_cache_spec(1, 16).bytes();
    auto loop = make_loop(o);
    ASSERT_NE(loop, nullptr);
    EXPECT_EQ(loop->options().kv_cache_dtype, c.dtype);
    EXPECT_EQ(loop->stats().kv_blocks_total, c.blocks);
    auto s = loop->submit(make_request(prompt, greedy(8)));
    ASSERT_TRUE(s) << s.status().message();
    const Outcome out = collect(**s);
    EXPECT_TRUE(out.finished) << out.error;
    ASSERT_EQ(out.tokens.size(), 1u);
    EXPECT_FALSE(out.tokens[0].empty());
  }
}

TEST_F(ServingLoopTest, PromptLogprobsMatchAPlainFeed) {
  const auto prompt = demo().encode(kTexts[11] + " " + kTexts[12]);
  ASSERT_GT(prompt.size(), 20u);
  const auto v = static_cast<size_t>(demo().vocab());
  std::vector<float> logits;
  {
    runtime::KvCache cache(demo().executor().kv_cache_spec(16, 16));
    runtime::SequenceRunner runner(demo().executor(), cache, demo().vocab());
    auto rows = runner.feed(prompt, true);
    ASSERT_TRUE(rows) << rows.status().message();
    logits = std::move(*rows);
  }
  ServingOptions o;
  o.max_batch_tokens = 8;  // the prompt runs in chunks over several steps
  auto loop = make_loop(o);
  ASSERT_NE(loop, nullptr);
  for (int round = 0; round < 2; ++round) {  // the second finds the prompt cached, and must not use it
    GenerationRequest req = make_request(prompt, greedy(3));
    req.prompt_logprobs = 2;
    auto s = loop->submit(std::move(req));
    ASSERT_TRUE(s);
    const Outcome o2 = collect(**s);
    ASSERT_TRUE(o2.finished) << o2.error;
    ASSERT_EQ(o2.prompt_logprobs.size(), prompt.size());
    EXPECT_FALSE(o2.prompt_logprobs[0].logprob.has_value());
    for (size_t i = 1; i < prompt.size(); ++i) {
      const TokenInfo& t = o2.prompt_logprobs[i];
      EXPECT_EQ(t.token, prompt[i]);
      ASSERT_TRUE(t.logprob.has_value());
      const float* row = logits.data() + (i - 1) * v;
      double max = row[0];
      for (size_t k = 0; k < v; ++k) max = std::max<double>(max, row[k]);
      double sum = 0;
      for (size_t k = 0; k < v; ++k) sum += std::exp(static_cast<double>(row[k]) - max);
      const double expected = row[prompt[i]] - max - std::log(sum);
      EXPECT_NEAR(*t.logprob, expected, 1e-4) << "position " << i;
      ASSERT_EQ(t.top.size(), 2u);
      const auto best = static_cast<int32_t>(std::max_element(row, row + v) - row);
      EXPECT_EQ(t.top[0].token, best);
      EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
    }
    EXPECT_EQ(o2.usage.cached_prompt_tokens, 0);
  }
}

// On the host's sampler and on device sampling alike.
TEST_F(ServingLoopTest, TwoChoicesShareThePrompt) {
  const auto prompt = demo().encode(kTexts[12] + " " + kTexts[0]);
  ASSERT_GT(prompt.size(), 17u);
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.seed = 7;
  SamplingParams p8 = p;
  p8.seed = 8;
  for (runtime::Executor* executor : {&demo().executor(), &demo().device_sampling_executor()}) {
    const std::string alone7 = demo().alone(prompt, p, executor).text;
    const std::string alone8 = demo().alone(prompt, p8, executor).text;

    auto loop = make_loop({}, executor);
    ASSERT_NE(loop, nullptr);
    GenerationRequest req = make_request(prompt, p);
    req.n = 2;
    auto s = loop->submit(std::move(req));
    ASSERT_TRUE(s);
    const Outcome o = collect(**s);
    ASSERT_TRUE(o.finished) << o.error;
    ASSERT_EQ(o.text.size(), 2u);
    EXPECT_EQ(o.text[0], alone7);
    EXPECT_EQ(o.text[1], alone8);
    EXPECT_EQ(o.finish[0], FinishReason::kLength);
    EXPECT_EQ(o.finish[1], FinishReason::kLength);
    EXPECT_EQ(o.usage.completion_tokens, 24);
    EXPECT_EQ(o.usage.prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_GE(loop->stats().prefix_hits, 16) << "the second choice should find the prompt cached";
  }
}

TEST_F(ServingLoopTest, StopStringsAndObserver) {
  const auto prompt = demo().encode(kTexts[0]);
  const GenerationResult full = demo().alone(prompt, greedy(30));
  auto loop = make_loop({});
  ASSERT_NE(loop, nullptr);
  std::atomic<int64_t> observed_tokens{0}, observed_steps{0};
  loop->set_step_observer([&](double seconds, int64_t tokens) {
    EXPECT_GE(seconds, 0.0);
    observed_tokens += tokens;
    ++observed_steps;
  });
  ASSERT_GT(full.text.size(), 12u);
  SamplingParams p = greedy(30);
  p.stop = {full.text.substr(8, 4)};
  auto s = loop->submit(make_request(prompt, p));
  ASSERT_TRUE(s);
  const Outcome o = collect(**s);
  ASSERT_TRUE(o.finished);
  EXPECT_EQ(o.finish[0], FinishReason::kStop);
  EXPECT_EQ(o.text[0], full.text.substr(0, full.text.find(p.stop[0])));
  // The stream ends inside the last step; the step is counted and observed after that, and the
  // stats that first show the request finished are published after both.
  EXPECT_TRUE(wait_for_stats(*loop, [&](const ServingStats& st) {
    return st.requests_finished == 1 && st.steps == observed_steps.load();
  }));
  EXPECT_GT(observed_tokens.load(), static_cast<int64_t>(prompt.size()));
}

TEST_F(ServingLoopTest, ShutdownEndsWhatIsLeftAndRefusesMore) {
  auto loop = make_loop({});
  ASSERT_NE(loop, nullptr);
  SamplingParams p = greedy(400);
  p.ignore_eos = true;
  auto s = loop->submit(make_request(demo().encode(kTexts[0]), p));
  ASSERT_TRUE(s);
  ASSERT_TRUE(wait_for_stats(*loop, [](const ServingStats& st) { return st.generated_tokens > 0; }));
  loop->shutdown(0);
  const Outcome o = collect(**s);
  EXPECT_FALSE(o.finished);
  EXPECT_NE(o.error.find("shutting down"), std::string::npos) << o.error;
  auto late = loop->submit(make_request(demo().encode(kTexts[1]), greedy(4)));
  ASSERT_FALSE(late);
  EXPECT_EQ(late.status().code(), StatusCode::kResourceExhausted);
  loop->shutdown(0);  // a second call is harmless
}

TEST_F(ServingLoopTest, ShutdownGraceLetsRequestsFinish) {
  auto loop = make_loop({});
  ASSERT_NE(loop, nullptr);
  auto s = loop->submit(make_request(demo().encode(kTexts[0]), greedy(8)));
  ASSERT_TRUE(s);
  loop->shutdown(60);
  const Outcome o = collect(**s);
  EXPECT_TRUE(o.finished) << o.error;
}

TEST_F(ServingLoopTest, RejectsBadOptions) {
  ServingOptions o;
  o.max_batch_tokens = demo().executor().max_tokens() + 1;
  auto e = ServingLoop::create(demo().executor(), demo().tokenizer(), demo().eos(), o);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  ServingOptions tiny;
  tiny.kv_cache_bytes = 100;
  EXPECT_FALSE(ServingLoop::create(demo().executor(), demo().tokenizer(), demo().eos(), tiny));
}

}  // namespace
}  // namespace kiln::llm
