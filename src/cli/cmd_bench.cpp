// kiln bench ENGINE [--prompt 512] [--decode 128] [--repeat 3] [--threads N]
// kiln bench ENGINE --offline --batch N [--prompt P] [--decode D] [--threads N]
// Runs on the engine's backend (a cuda-sm90 engine on the GPU, where the bandwidth is the
// device's copy bandwidth).
//
// Prefill: one prompt of --prompt random tokens, in steps of the engine's max batch tokens.
// Decode: --decode single-token steps after it. Each figure is the median of --repeat runs. The
// bytes of weights one decode step reads (every matmul weight once, one row of each embedding
// table) times decode tokens/s, over the read bandwidth measured in the same run, is the
// fraction of the memory-bandwidth limit reached.
//
// Offline: N requests of --prompt random tokens, each generating --decode tokens (greedy unless
// --temperature, ignore_eos), submitted at once to the serving loop (continuous batching, no HTTP); prints
// requests/s, output and total tokens/s, the mean step time and the serving loop's own time per step
// outside the model (scheduling, sampling, detokenising) as a share of the model's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "backends/cpu/memory_bandwidth.h"
#if KILN_HAVE_CUDA
#include "backends/cuda/cuda_device.h"
#endif
#include "base/mapped_file.h"
#include "cli/commands.h"
#include "llm/serving/serving_loop.h"
#include "runtime/sequence_runner.h"

namespace kiln::cli {
namespace {

struct BenchArgs {
  std::string engine;
  int64_t prompt = 512, decode = 128;
  int repeat = 3;
  int threads = 0;
  bool offline = false;
  int64_t batch = 1;
  double kv_cache_gib = 0.0;  // --offline: KV pool size; 0 = the serving loop's default
  double gpu_memory_fraction = 0.0;  // --offline, cuda engines: the KV pool from the GPU's free memory; 0: not given
  std::string kv_cache_dtype = "auto";
  float temperature = 0.0f, top_p = 1.0f;  // --offline requests' sampling (seeded by their index)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Weight bytes one decode step streams.
uint64_t decode_bytes_per_token(const runtime::LoadedModel& model) {
  const ir::Graph& g = model.graph();
  std::set<std::string> matmul_weights;
  for (const auto& n : g.nodes()) {
    if (n.op == "matmul") {
      for (size_t i = 1; i < n.inputs.size(); ++i) matmul_weights.insert(g.value(n.inputs[i]).name);
    }
  }
  uint64_t bytes = 0;
  for (const auto& [name, w] : g.weights()) {
    if (matmul_weights.count(name) || w.shape.size() == 1) {
      bytes += w.stored.size();
    } else {
      bytes += ir::weight_format_row_bytes(w.format, w.cols());  // an embedding lookup reads one row
    }
  }
  return bytes;
}

// The share of the engine the kernel maps with 2 MiB pages. Streaming the weights through 4 KiB
// pages costs a TLB miss per page; whether a file gets huge pages depends on how the page cache
// holds it, which an earlier process may have decided.
void print_page_sizes(const engine::EngineFile& file) {
  const std::optional<uint64_t> huge = huge_page_bytes(file.bytes());
  if (!huge) return;
  const double share = static_cast<double>(*huge) / static_cast<double>(file.bytes().size());
  std::printf("pages    %8.1f%% of the engine mapped in 2 MiB pages\n", 100.0 * share);
  if (share < 0.5) {
    std::printf(
        "note: the page cache holds most of this engine in small pages (from an earlier process), so decode\n"
        "      pays a TLB miss every 4 KiB; after `dd if=%s iflag=nocache count=0` drops it from the\n"
        "      cache, the next run reads it into 2 MiB pages\n",
        file.name().c_str());
  }
}

// Bytes/s the weights can stream at: the CPU's read bandwidth, or the GPU's copy bandwidth.
double measure_bandwidth(bool gpu) {
#if KILN_HAVE_CUDA
  if (gpu) {
    auto bw = cuda::cuda_measure_copy_bandwidth(0);
    return bw ? *bw : 0.0;
  }
#endif
  return gpu ? 0.0 : cpu::measure_read_bandwidth();
}

// Submits `prompts` and waits for every request to end; returns the first error. It polls the
// streams every 2 ms rather than waking on each event, so that it takes no CPU from the serving loop.
Status run_requests(llm::ServingLoop& loop, const std::vector<std::vector<int32_t>>& prompts, int64_t decode,
                    const BenchArgs& a) {
  std::vector<std::shared_ptr<llm::ResponseStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    llm::GenerationRequest req;
    req.prompt = prompts[i];
    req.params.temperature = a.temperature;
    req.params.top_p = a.top_p;
    req.params.seed = i;
    req.params.max_tokens = static_cast<int32_t>(decode);
    req.params.ignore_eos = true;
    KILN_ASSIGN_OR_RETURN(auto stream, loop.submit(std::move(req)));
    streams.push_back(std::move(stream));
  }
  std::vector<llm::RequestEvent> events;
  while (!streams.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (size_t i = 0; i < streams.size();) {
      events.clear();
      const bool done = streams[i]->pop_all(events);
      for (const auto& e : events) {
        if (e.kind == llm::RequestEvent::Kind::kError) return internal_error("a request failed: " + e.error);
      }
      if (done) {
        streams[i] = std::move(streams.back());
        streams.pop_back();
      } else {
        ++i;
      }
    }
  }
  return Status::ok();
}

int run_offline_bench(const BenchArgs& a, std::optional<runtime::KvCacheDtype> kv_dtype) {
  if (a.prompt < 1 || a.decode < 1 || a.batch < 1) return fail(invalid_argument("--prompt, --decode, --batch must be >= 1"));
  auto session = open_session(a.engine, a.threads, 1);
  if (!session) return fail(session.status());
  uint64_t kv_cache_bytes = static_cast<uint64_t>(a.kv_cache_gib * 1073741824.0);
  if (a.gpu_memory_fraction != 0.0) {
    auto bytes = gpu_kv_cache_bytes(*session->model, a.gpu_memory_fraction, "--kv-cache-gib", a.kv_cache_gib != 0.0);
    if (!bytes) return fail(bytes.status());
    kv_cache_bytes = *bytes;
  }
  const auto& facts = session->model->facts();
  if (a.prompt + a.decode > facts.max_seq_len) {
    return fail(invalid_argument("--prompt + --decode exceed the engine's max sequence length " +
                                 std::to_string(facts.max_seq_len)));
  }
  auto tokenizer = llm::tokenizer_from_files(session->model->files());
  if (!tokenizer) return fail(tokenizer.status());
  llm::ServingOptions options;
  options.max_num_seqs = a.batch;
  options.kv_cache_bytes = kv_cache_bytes;
  options.kv_cache_dtype = kv_dtype.value_or(session->model->native_kv_cache_dtype());
  options.on_loop_thread_start = [threads = a.threads] { cpu::cpu_set_threads(threads); };
  auto loop = llm::ServingLoop::create(*session->executor, **tokenizer, {}, options);
  if (!loop) return fail(loop.status());
  const llm::ServingOptions& used = (*loop)->options();

  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(facts.vocab_size - 1));
  auto random_prompts = [&](int64_t n) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(n), std::vector<int32_t>(static_cast<size_t>(a.prompt)));
    for (auto& p : prompts) {
      for (auto& t : p) t = dist(rng);
    }
    return prompts;
  };
  std::printf("engine   %s (%s, %s)\n", a.engine.c_str(), session->model->file().header().target.c_str(),
              session->model->file().header().build_options.c_str());
  std::printf("threads  %d\n", cpu::cpu_threads());
  std::printf("serving  %lld requests of %lld prompt + %lld generated tokens; max_num_seqs %lld, "
              "max_batch_tokens %lld, KV pool %.0f MiB %s\n",
              static_cast<long long>(a.batch), static_cast<long long>(a.prompt), static_cast<long long>(a.decode),
              static_cast<long long>(used.max_num_seqs), static_cast<long long>(used.max_batch_tokens),
              static_cast<double>(used.kv_cache_bytes) / (1 << 20),
              std::string(runtime::kv_cache_dtype_name(used.kv_cache_dtype)).c_str());
  // A short warm-up run (caches, page tables, thread pool), not measured.
  if (Status st = run_requests(**loop, random_prompts(1), std::min<int64_t>(a.decode, 8), a); !st) return fail(st);

  const llm::ServingStats before = (*loop)->stats();
  const auto t0 = std::chrono::steady_clock::now();
  if (Status st = run_requests(**loop, random_prompts(a.batch), a.decode, a); !st) return fail(st);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const llm::ServingStats after = (*loop)->stats();

  const auto steps = static_cast<double>(after.steps - before.steps);
  const double step_s = after.step_seconds - before.step_seconds;
  const double loop_s = after.loop_seconds - before.loop_seconds;
  const auto n = static_cast<double>(a.batch);
  std::printf("requests %10.2f requests/s   (%.3f s for all)\n", n / wall, wall);
  std::printf("output   %10.1f tokens/s\n", n * static_cast<double>(a.decode) / wall);
  std::printf("total    %10.1f tokens/s   (prompt + output)\n", n * static_cast<double>(a.prompt + a.decode) / wall);
  std::printf("steps    %10.0f            mean %.3f ms in the model, %.3f ms in the serving loop around it (%.1f%%)\n",
              steps, 1e3 * step_s / steps, 1e3 * loop_s / steps, 100.0 * loop_s / step_s);
  // The steps that computed no prompt token: the model's decode rate at this batch, without the
  // prefill steps and the time around the model.
  const auto decode_steps = static_cast<double>(after.decode_steps - before.decode_steps);
  if (decode_steps > 0) {
    const auto rows = static_cast<double>(after.decode_rows - before.decode_rows);
    const double decode_s = after.decode_step_seconds - before.decode_step_seconds;
    std::printf("decode   %10.1f tokens/s   (in the model: %.0f steps of generated tokens only, %.1f rows and "
                "%.3f ms a step)\n",
                rows / decode_s, decode_steps, rows / decode_steps, 1e3 * decode_s / decode_steps);
  }
  std::printf("preemptions %lld\n", static_cast<long long>(after.preemptions - before.preemptions));
  (*loop)->shutdown(0);
  return 0;
}

int run_bench(const BenchArgs& a) {
  if (a.engine.empty()) return fail(invalid_argument("an engine file is required: kiln bench ENGINE (or kiln bench serve --url URL)"));
  auto kv_dtype = runtime::parse_kv_cache_dtype_choice(a.kv_cache_dtype);
  if (!kv_dtype) return fail(kv_dtype.status().with_context("--kv-cache-dtype"));
  if (a.offline) return run_offline_bench(a, *kv_dtype);
  if (a.prompt < 1 || a.decode < 1 || a.repeat < 1) return fail(invalid_argument("--prompt, --decode, --repeat must be >= 1"));
  auto session = open_session(a.engine, a.threads, a.prompt + a.decode, *kv_dtype);
  if (!session) return fail(session.status());
  const auto& facts = session->model->facts();
  if (a.prompt + a.decode > facts.max_seq_len) {
    return fail(invalid_argument("--prompt + --decode exceed the engine's max sequence length " +
                                 std::to_string(facts.max_seq_len)));
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(facts.vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt));
  for (auto& t : prompt) t = dist(rng);

  std::printf("engine   %s (%s, %s)\n", a.engine.c_str(), session->model->file().header().target.c_str(),
              session->model->file().header().build_options.c_str());
  const bool gpu = session->model->file().header().target.rfind("cuda-", 0) == 0;
  std::printf("device   %s\n", session->device.c_str());
  std::printf("kv cache %s\n", std::string(runtime::kv_cache_dtype_name(session->cache->spec().dtype)).c_str());
  // Memory bandwidth on a shared machine moves from second to second: it is probed before and
  // after the runs (the best pass of either), so the limit is never one unlucky moment.
  const double bw_before = measure_bandwidth(gpu);
  std::vector<double> prefill_tps, decode_tps;
  runtime::SequenceRunner runner(*session->executor, *session->cache, facts.vocab_size);
  // Greedy, with the argmax on the device when the backend samples there (only ids come back).
  runtime::SamplingBatch greedy;
  greedy.add_row();
  auto next_after = [&](std::span<const int32_t> tokens) -> Expected<int32_t> {
    if (session->executor->samples_on_device()) return runner.feed_sampled(tokens, greedy);
    KILN_ASSIGN_OR_RETURN(std::vector<float> logits, runner.feed(tokens, false));
    return runtime::argmax(logits);
  };
  for (int r = 0; r < a.repeat + 1; ++r) {  // the first run warms caches and page tables
    runner.reset();
    auto t0 = std::chrono::steady_clock::now();
    auto next = next_after(prompt);
    if (!next) return fail(next.status());
    const double tp = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < a.decode; ++i) {
      const int32_t token = *next;
      next = next_after({&token, 1});
      if (!next) return fail(next.status());
    }
    const double td = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) continue;
    prefill_tps.push_back(static_cast<double>(a.prompt) / tp);
    decode_tps.push_back(static_cast<double>(a.decode) / td);
  }
  const double bw = std::max(bw_before, measure_bandwidth(gpu));
  const uint64_t bytes = decode_bytes_per_token(*session->model);
  const double dec = median(decode_tps);
  std::printf("prefill  %8.1f tokens/s   (%lld-token prompt, median of %d)\n", median(prefill_tps),
              static_cast<long long>(a.prompt), a.repeat);
  std::printf("decode   %8.2f tokens/s   (%lld tokens, median of %d)\n", dec, static_cast<long long>(a.decode), a.repeat);
  std::printf("weights  %8.1f MB read per decoded token\n", static_cast<double>(bytes) / 1e6);
  if (!gpu) print_page_sizes(session->model->file());
  std::printf("memory   %8.2f GB/s %s bandwidth measured\n", bw / 1e9, gpu ? "device copy (read + write)" : "read");
  std::printf("decode reaches %.0f%% of the bandwidth limit (%.2f tokens/s)\n",
              100.0 * dec * static_cast<double>(bytes) / bw, bw / static_cast<double>(bytes));
  return 0;
}

}  // namespace

CommandFn add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed against the memory bandwidth");
  // Not ->required(): CLI11 fills a required positional before it looks for `kiln bench serve`.
  cmd->add_option("engine", args->engine, "engine file");
  cmd->add_option("--prompt", args->prompt, "prompt tokens")->capture_default_str();
  cmd->add_option("--decode", args->decode, "decoded tokens")->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "runs (median reported)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "threads (default: all cores)");
  cmd->add_flag("--offline", args->offline, "serve --batch requests through the serving loop (no HTTP)");
  cmd->add_option("--batch", args->batch, "requests submitted at once (--offline)")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "--offline: the requests' temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "--offline: the requests' top_p")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                  "KV cache element: auto (bf16 for a bf16 engine, else fp32), fp32, bf16 (half the bytes) or fp8 (e4m3, a "
                  "quarter)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-gib", args->kv_cache_gib,
                  "KV pool in GiB (--offline; default: the serving loop's, at most 1 GiB)");
  cmd->add_option("--gpu-memory-fraction", args->gpu_memory_fraction,
                  "--offline, cuda engines: the share of the GPU's memory kiln may hold; the KV pool takes what the "
                  "weights and activations leave of it (e.g. 0.9)");
  return [args] { return run_bench(*args); };
}

}  // namespace kiln::cli
