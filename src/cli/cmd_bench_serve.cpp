// kiln bench serve --url URL [--endpoint PATH] [--model NAME] [--request-rate R] [--burstiness B]
//                  [--max-concurrency C] [--num-prompts N] [--dataset FILE.jsonl | --tokenizer PATH
//                  --random-input-len I --random-output-len O --random-range-ratio X] [--api-key K]
//                  [--seed S] [--goodput ttft:MS tpot:MS e2el:MS] [--json OUT]
//
// A load generator for any OpenAI-compatible server (Kiln's own, llama-server, vLLM): sends
// streaming requests on an open-loop arrival process or with a fixed number in flight, and prints
// throughput, TTFT, TPOT, ITL and end-to-end latency. The pieces live in cli/bench_serve/: the
// arrival process, the datasets, the SSE and OpenAI stream parsing, the HTTP client, the report.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "cli/bench_serve/arrival_schedule.h"
#include "cli/bench_serve/bench_dataset.h"
#include "cli/bench_serve/bench_report.h"
#include "cli/bench_serve/load_client.h"
#include "cli/bench_serve/random_dataset.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "llm/tokenizers/tokenizer.h"
#include "runtime/loaded_model.h"

namespace kiln::cli {
namespace {

using namespace bench_serve;

struct BenchServeArgs {
  std::string url, endpoint, model, dataset, tokenizer, api_key, json_out;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int64_t max_concurrency = 0;  // 0: no limit
  int64_t num_prompts = 100;
  int64_t input_len = 256, output_len = 128;
  bool output_len_given = false;
  double range_ratio = 0.0;
  uint64_t seed = 0;
  double timeout_s = 300;
  std::vector<std::string> goodput;
};

Expected<std::unique_ptr<llm::Tokenizer>> load_tokenizer(const std::string& source) {
  std::error_code ec;
  if (!std::filesystem::exists(source, ec)) return not_found(source + ": no such engine file or model directory");
  std::map<std::string, std::string> files;
  if (std::filesystem::is_directory(source, ec)) {
    KILN_ASSIGN_OR_RETURN(files, llm::tokenizer_files_in_dir(source));
  } else {
    KILN_ASSIGN_OR_RETURN(auto model, runtime::LoadedModel::load(source));
    files = model->files();
  }
  auto tokenizer = llm::tokenizer_from_files(files);
  if (!tokenizer) return tokenizer.status().with_context(source);
  return tokenizer;
}

// The prompts of the run: the dataset's lines in order, repeated when it has fewer than
// --num-prompts, or random ones.
Expected<std::vector<BenchPrompt>> make_prompts(const BenchServeArgs& a, Endpoint endpoint) {
  if (a.num_prompts < 1) return invalid_argument("--num-prompts must be >= 1");
  if (!a.dataset.empty()) {
    std::optional<int64_t> default_output;
    if (a.output_len_given) default_output = a.output_len;
    KILN_ASSIGN_OR_RETURN(std::vector<BenchPrompt> lines, load_jsonl_dataset(a.dataset, default_output));
    std::vector<BenchPrompt> prompts;
    for (int64_t i = 0; i < a.num_prompts; ++i) prompts.push_back(lines[static_cast<size_t>(i) % lines.size()]);
    if (endpoint == Endpoint::kChatCompletions) {
      for (const BenchPrompt& p : prompts) {
        if (p.is_ids()) return invalid_argument(a.dataset + ": token-id prompts cannot go to the chat endpoint");
      }
    }
    return prompts;
  }
  if (a.tokenizer.empty()) {
    return invalid_argument(
        "random prompts need --tokenizer (the engine file or model directory the server runs), or pass --dataset");
  }
  KILN_ASSIGN_OR_RETURN(auto tokenizer, load_tokenizer(a.tokenizer));
  RandomSpec spec{a.num_prompts, a.input_len, a.output_len, a.range_ratio, a.seed,
                  endpoint == Endpoint::kChatCompletions};
  return random_dataset(spec, *tokenizer);
}

int run_bench_serve(BenchServeArgs a) {
  auto url = parse_server_url(a.url);
  if (!url) return fail(url.status());
  std::string path = a.endpoint.empty() ? (url->path.empty() ? "/v1/completions" : url->path) : a.endpoint;
  auto endpoint = endpoint_kind(path);
  if (!endpoint) return fail(endpoint.status());
  auto slo = parse_slo(a.goodput);
  if (!slo) return fail(slo.status());
  if (a.max_concurrency < 0) return fail(invalid_argument("--max-concurrency must be >= 1"));
  if (!(a.timeout_s > 0)) return fail(invalid_argument("--timeout must be > 0 seconds"));
  auto arrivals = arrival_schedule(a.num_prompts, a.request_rate, a.burstiness, a.seed);
  if (!arrivals) return fail(arrivals.status());
  auto prompts = make_prompts(a, *endpoint);
  if (!prompts) return fail(prompts.status());

  LoadConfig config;
  config.url = *url;
  config.path = path;
  config.endpoint = *endpoint;
  config.api_key = a.api_key;
  config.io_timeout_s = a.timeout_s;
  if (a.max_concurrency > 0) config.max_concurrency = a.max_concurrency;
  config.model = a.model;
  if (config.model.empty()) {
    auto model = first_served_model(config);
    if (!model) return fail(model.status());
    config.model = *model;
  }

  // One request first, so that a wrong endpoint, model or key fails in a second with the server's
  // own message rather than N times; it also warms the server up.
  const std::function<void(int64_t, int64_t)> quiet = [](int64_t, int64_t) {};
  auto probe = run_load(config, {prompts->front()}, {0.0}, quiet);
  if (!probe) return fail(probe.status());
  if (!probe->records[0].success) {
    return fail(io_error("the test request to http://" + url->host_header() + path + " failed: " + probe->records[0].error));
  }

  std::printf("kiln bench serve: %s%s, model %s, %lld prompts, rate %s req/s%s, burstiness %.2f, max concurrency %s\n",
              url->host_header().c_str(), path.c_str(), config.model.c_str(), static_cast<long long>(a.num_prompts),
              std::isinf(a.request_rate) ? "inf" : std::to_string(a.request_rate).c_str(),
              std::isinf(a.request_rate) ? " (all at once)" : "", a.burstiness,
              a.max_concurrency > 0 ? std::to_string(a.max_concurrency).c_str() : "none");
  std::fflush(stdout);
  ProgressBar bar;
  const std::function<void(int64_t, int64_t)> progress = [&](int64_t done, int64_t total) {
    bar.update("requests " + std::to_string(done) + "/" + std::to_string(total), static_cast<uint64_t>(done),
               static_cast<uint64_t>(total));
  };
  auto result = run_load(config, *prompts, *arrivals, progress);
  bar.finish();
  if (!result) return fail(result.status());
  const BenchReport report = make_report(*result, *slo);
  std::fputs(format_report(report).c_str(), stdout);

  if (!a.json_out.empty()) {
    nlohmann::json j = report_json(report, *result, *slo);
    j["config"] = {{"url", a.url},
                   {"endpoint", path},
                   {"model", config.model},
                   {"request_rate", std::isinf(a.request_rate) ? nlohmann::json("inf") : nlohmann::json(a.request_rate)},
                   {"burstiness", a.burstiness},
                   {"max_concurrency", a.max_concurrency > 0 ? nlohmann::json(a.max_concurrency) : nlohmann::json()},
                   {"num_prompts", a.num_prompts},
                   {"dataset", a.dataset.empty() ? nlohmann::json("random") : nlohmann::json(a.dataset)},
                   {"random_input_len", a.input_len},
                   {"random_output_len", a.output_len},
                   {"random_range_ratio", a.range_ratio},
                   {"seed", a.seed}};
    std::ofstream out(a.json_out);
    out << j.dump(2) << "\n";
    if (!out) return fail(io_error(a.json_out + ": cannot write"));
  }
  return 0;
}

}  // namespace

CommandFn add_bench_serve_command(CLI::App& bench) {
  auto args = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "Load-test an OpenAI-compatible server (kiln serve, llama-server, ...)");
  cmd->footer(
      "Requests stream (SSE) with max_tokens, ignore_eos and temperature 0, so every request generates exactly\n"
      "its output length; token counts come from the server's final usage chunk.\n"
      "Random prompts are token ids drawn from the vocabulary of --tokenizer (special tokens left out) and\n"
      "sent as a list of ints, which /v1/completions accepts on Kiln, llama-server and vLLM alike, so the\n"
      "prompt length is exact and both servers see the same tokens. For /v1/chat/completions the ids are\n"
      "decoded and sent as text (its length is then what the server's tokenizer makes of it).\n"
      "Without --request-rate every request is sent at once and --max-concurrency alone paces the run\n"
      "(a closed loop); with it, arrivals are a Poisson process (--burstiness 1) or gamma-distributed.");
  cmd->add_option("--url", args->url, "server, e.g. http://127.0.0.1:8000")->required();
  cmd->add_option("--endpoint", args->endpoint, "/v1/completions (default) or /v1/chat/completions");
  cmd->add_option("--model", args->model, "model name to send (default: the first of GET /v1/models)");
  cmd->add_option("--request-rate", args->request_rate, "requests per second (default: inf, all at once)");
  cmd->add_option("--burstiness", args->burstiness, "gamma shape of the arrival gaps; 1 = Poisson")->capture_default_str();
  cmd->add_option("--max-concurrency", args->max_concurrency, "requests in flight at most (default: no limit)");
  cmd->add_option("--num-prompts", args->num_prompts, "requests to send")->capture_default_str();
  cmd->add_option("--dataset", args->dataset, "JSONL file: {\"prompt\": text or [ids], \"output_len\": N} a line");
  cmd->add_option("--tokenizer", args->tokenizer, "engine file or model directory to draw random prompts from");
  cmd->add_option("--random-input-len", args->input_len, "prompt tokens of random prompts")->capture_default_str();
  cmd->add_option_function<int64_t>(
         "--random-output-len",
         [args](const int64_t& v) {
           args->output_len = v;
           args->output_len_given = true;
         },
         "tokens to generate (also the default for dataset lines without output_len) [128]");
  cmd->add_option("--random-range-ratio", args->range_ratio, "lengths vary uniformly within this fraction")
      ->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "sent as a bearer token");
  cmd->add_option("--seed", args->seed, "seed of prompts and arrivals")->capture_default_str();
  cmd->add_option("--goodput", args->goodput, "objectives in ms: ttft:MS tpot:MS e2el:MS")->expected(1, 3);
  cmd->add_option("--timeout", args->timeout_s, "seconds any connect, write or read may wait")->capture_default_str();
  cmd->add_option("--json", args->json_out, "write every figure and per-request record to this file");
  return [args] { return run_bench_serve(*args); };
}

}  // namespace kiln::cli
