// kiln serve [ENGINE] [--host H] [--port P] [--api-key KEY | --api-key-file F] [...]
// kiln serve --model-repository DIR [--engine-cache-dir D] [--host H] [--port P] [...]
// The HTTP server: OpenAI- and KServe-compatible endpoints over one continuously batched
// ServingLoop. With no ENGINE it serves the bundled demo model (cli/demo_engine.h). With
// --model-repository it serves the general models of a Triton-style repository instead (KServe
// infer with dynamic batching, server/repository/).
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "cli/demo_engine.h"
#include "llm/serving/serving_loop.h"
#include "server/generation/api_service.h"
#include "server/http/http_server.h"
#include "server/repository/grpc_server.h"
#include "server/repository/model_repository.h"
#include "server/repository/repository_service.h"
#include "server/generation/served_model.h"
#include "server/generation/server_metrics.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

struct ServeArgs {
  std::string engine, host = "127.0.0.1", api_key, api_key_file, served_model_name, kv_cache_memory, chat_template,
      tool_call_parser;
  std::string kv_cache_dtype = "auto";
  std::string model_repository, engine_cache_dir;
  std::vector<std::string> allowed_hosts, allowed_origins;
  int grpc_port = 8001;
  int port = 8000, threads = 0;
  double gpu_memory_fraction = 0.0;  // 0: not given
  int64_t max_num_seqs = 64, max_batch_tokens = 0, max_queue = 256;
  bool log_prompts = false, no_prefix_caching = false, no_ui = false;
  double shutdown_grace = 30, request_timeout = 30;
  size_t max_body_bytes = 4u << 20;
  int stream_interval = 1;
  int network_threads = 0;  // 0: server::default_network_threads
};

// "512MiB", "1GiB", "64MB", "1048576".
Expected<uint64_t> parse_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
  if (used > 0 && v > 0) {
    for (const auto& [name, scale] : kUnits) {
      if (unit == name) return static_cast<uint64_t>(v * scale);
    }
  }
  return invalid_argument("--kv-cache-memory '" + text + "' is not a size (e.g. 512MiB, 2GiB)");
}

Expected<std::string> read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(std::string(what) + " '" + path + "' cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for SIGINT or SIGTERM on the server's signal handler; returns the signal.
int wait_for_signal(server::HttpServer& http) {
  std::mutex mu;
  std::condition_variable cv;
  int signal_seen = 0;
  http.on_signal([&](int sig) {
    std::lock_guard lock(mu);
    signal_seen = sig;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return signal_seen != 0; });
  return signal_seen;
}

std::string default_engine_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/kiln/engines";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") + "/.cache/kiln/engines";
}

// kiln serve --model-repository DIR: the general models of a Triton-style repository.
int run_serve_repository(const ServeArgs& a, const server::ServerConfig& config) {
  if (!a.engine.empty()) return fail(invalid_argument("give an ENGINE or --model-repository, not both"));
  if (!a.chat_template.empty() || !a.tool_call_parser.empty()) {
    return fail(invalid_argument("--chat-template and --tool-call-parser are for an LLM engine, not --model-repository"));
  }
  std::error_code ec;
  if (!fs::is_directory(a.model_repository, ec)) {
    return fail(not_found("--model-repository '" + a.model_repository + "' is not a directory"));
  }
  if (a.grpc_port < -1 || a.grpc_port > 65535) return fail(invalid_argument("--grpc-port must be a port, 0 (any) or -1 (none)"));
  server::RepositoryMetrics metrics;
  server::ModelRepository::Options options;
  options.root = a.model_repository;
  options.cache_dir = a.engine_cache_dir.empty() ? default_engine_cache_dir() : a.engine_cache_dir;
  options.threads = a.threads;
  options.max_queue = static_cast<size_t>(a.max_queue);
  options.log = [](const std::string& line) {
    std::fprintf(stderr, "kiln serve: %s\n", line.c_str());
    std::fflush(stderr);
  };
  server::ModelRepository repository(options, metrics);
  repository.load_all();
  server::RepositoryService service(repository, metrics, config);
  server::HttpServer http(service, config);
  if (Status s = http.start(); !s) return fail(s);
  std::unique_ptr<server::GrpcServer> grpc;
  if (a.grpc_port >= 0) {
    server::GrpcServer::Options go;
    go.host = config.host;
    go.port = a.grpc_port;
    go.api_key = config.api_key;
    go.max_message_bytes = config.max_body_bytes;
    grpc = std::make_unique<server::GrpcServer>(repository, metrics, go);
    if (Status s = grpc->start(); !s) return fail(s);
    grpc->set_ready(true);
  }
  service.set_ready(true);
  int ready = 0, total = 0;
  for (const auto& e : repository.index()) {
    ++total;
    ready += e.state == "READY";
  }
  const std::string base = "http://" + (config.host.find(':') != std::string::npos ? "[" + config.host + "]" : config.host) +
                           ":" + std::to_string(http.port());
  const std::string grpc_address =
      grpc ? ", gRPC " + (config.host.find(':') != std::string::npos ? "[" + config.host + "]" : config.host) + ":" +
                 std::to_string(grpc->port())
           : std::string();
  std::printf("kiln serve: model repository %s ready on %s%s (%d of %d models READY; KServe v2, /metrics)\n",
              a.model_repository.c_str(), base.c_str(), grpc_address.c_str(), ready, total);
  std::printf("try: curl -X POST %s/v2/repository/index%s\n", base.c_str(),
              config.api_key.empty() ? "" : " -H \"Authorization: Bearer $KEY\"");
  std::fflush(stdout);
  const int sig = wait_for_signal(http);
  std::fprintf(stderr, "kiln serve: %s received; finishing running requests (up to %.0f s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", config.shutdown_grace_s);
  service.set_ready(false);
  http.stop_accepting();
  if (grpc) grpc->stop(config.shutdown_grace_s);
  http.wait_idle(config.shutdown_grace_s);
  http.stop();
  std::fprintf(stderr, "kiln serve: stopped\n");
  return 0;
}

int run_serve(ServeArgs a) {
  // Configuration first: every flag is checked before anything heavy happens.
  server::ServerConfig config;
  config.host = a.host;
  config.port = a.port;
  config.log_prompts = a.log_prompts;
  config.ui = !a.no_ui;
  config.shutdown_grace_s = a.shutdown_grace;
  config.request_timeout_s = a.request_timeout;
  config.idle_timeout_s = std::max(a.request_timeout, 5.0);
  config.max_body_bytes = a.max_body_bytes;
  config.stream_interval = a.stream_interval;
  config.network_threads =
      a.network_threads != 0 ? a.network_threads : server::default_network_threads(std::thread::hardware_concurrency());
  if (!a.api_key.empty() && !a.api_key_file.empty()) return fail(invalid_argument("give --api-key or --api-key-file, not both"));
  config.api_key = a.api_key;
  if (!a.api_key_file.empty()) {
    auto key = read_text_file(a.api_key_file, "--api-key-file");
    if (!key) return fail(key.status());
    std::string k = *key;
    while (!k.empty() && std::isspace(static_cast<unsigned char>(k.back()))) k.pop_back();
    if (k.empty()) return fail(invalid_argument("--api-key-file '" + a.api_key_file + "' is empty"));
    config.api_key = k;
  }
  config.allowed_hosts = a.allowed_hosts.empty() ? server::default_allowed_hosts(config.host) : a.allowed_hosts;
  config.allowed_origins = a.allowed_origins;
  if (Status s = server::validate_server_config(config); !s) return fail(s);
  if (!server::is_loopback_host(config.host) && config.api_key.empty()) {
    std::fprintf(stderr, "kiln serve: listening on %s without --api-key: anyone who can reach this address can use the server\n",
                 config.host.c_str());
  }
  if (a.max_queue < 1) return fail(invalid_argument("--max-queue must be at least 1"));
  if (a.threads < 0) return fail(invalid_argument("--threads must be >= 0 (0: all cores)"));
  if (!a.model_repository.empty()) return run_serve_repository(a, config);
  llm::ServingOptions options;
  if (a.max_num_seqs < 1 || a.max_num_seqs > 4096) return fail(invalid_argument("--max-num-seqs must be in [1, 4096]"));
  if (a.max_batch_tokens < 0) return fail(invalid_argument("--max-batch-tokens must be >= 0 (0: the engine's limit)"));
  options.max_num_seqs = a.max_num_seqs;
  options.max_batch_tokens = a.max_batch_tokens;
  options.max_queue = static_cast<size_t>(a.max_queue);
  options.prefix_caching = !a.no_prefix_caching;
  if (!a.kv_cache_memory.empty()) {
    auto bytes = parse_size(a.kv_cache_memory);
    if (!bytes) return fail(bytes.status());
    options.kv_cache_bytes = *bytes;
  }
  auto kv_dtype = runtime::parse_kv_cache_dtype_choice(a.kv_cache_dtype);
  if (!kv_dtype) return fail(kv_dtype.status().with_context("--kv-cache-dtype"));
  std::optional<std::string> chat_template;
  if (!a.chat_template.empty()) {
    auto text = read_text_file(a.chat_template, "--chat-template");
    if (!text) return fail(text.status());
    chat_template = std::move(*text);
  }
  std::optional<llm::tools::ToolCallSyntax> tool_syntax;
  if (!a.tool_call_parser.empty()) {
    tool_syntax = llm::tools::tool_call_syntax_named(a.tool_call_parser);
    if (!tool_syntax) {
      return fail(invalid_argument("--tool-call-parser '" + a.tool_call_parser + "' is not one of " +
                                   std::string(llm::tools::kToolCallSyntaxNames)));
    }
  }

  std::string engine_path = a.engine;
  if (engine_path.empty()) {
    auto p = demo_engine(a.threads);
    if (!p) return fail(p.status());
    engine_path = *p;
  }
  // The backend the engine's target names, as for kiln run and bench (cuda-*: the GPU).
  auto session = open_session(engine_path, a.threads, 1);
  if (!session) return fail(session.status());
  std::unique_ptr<runtime::LoadedModel>* model = &session->model;
  std::unique_ptr<runtime::Executor>* executor = &session->executor;
  options.kv_cache_dtype = kv_dtype->value_or((*model)->native_kv_cache_dtype());
  if (a.gpu_memory_fraction != 0.0) {
    auto bytes = gpu_kv_cache_bytes(**model, a.gpu_memory_fraction, "--kv-cache-memory", !a.kv_cache_memory.empty());
    if (!bytes) return fail(bytes.status());
    options.kv_cache_bytes = *bytes;
  }
  if (options.max_batch_tokens > (*executor)->max_tokens()) {
    return fail(invalid_argument("--max-batch-tokens " + std::to_string(options.max_batch_tokens) + " exceeds the engine's " +
                                 std::to_string((*executor)->max_tokens()) + " (set at kiln build)"));
  }
  std::string name = a.served_model_name;
  if (name.empty()) name = engine_path == a.engine ? fs::path(engine_path).stem().string() : "demo";
  auto served = server::served_model_from_files((*model)->files(), name, (*model)->facts().max_seq_len,
                                                (*model)->facts().vocab_size, chat_template, tool_syntax);
  if (!served) return fail(served.status());
  // OpenMP's thread count is per thread: the loop thread, which runs the steps, sets its own.
  const int threads = a.threads;
  options.on_loop_thread_start = [threads] { cpu::cpu_set_threads(threads); };
  auto loop = llm::ServingLoop::create(**executor, *served->tokenizer, served->eos_ids, options);
  if (!loop) return fail(loop.status());

  server::ServerMetrics metrics(name);
  (*loop)->set_step_observer([&metrics](double seconds, int64_t) { metrics.record_step(seconds); });
  server::ApiService service(*served, **loop, metrics, config);
  server::HttpServer http(service, config);
  if (Status s = http.start(); !s) return fail(s);
  service.set_ready(true);
  const std::string base = "http://" + (config.host.find(':') != std::string::npos ? "[" + config.host + "]" : config.host) +
                           ":" + std::to_string(http.port());
  std::printf("kiln serve: model '%s' ready on %s (OpenAI /v1, KServe /v2, /metrics%s)\n", name.c_str(), base.c_str(),
              config.ui ? ", playground /" : "");
  std::printf("try: curl %s/v1/completions -H 'Content-Type: application/json'%s -d '{\"model\": \"%s\", \"prompt\": \"It is a truth universally\", \"max_tokens\": 32}'\n",
              base.c_str(), config.api_key.empty() ? "" : " -H \"Authorization: Bearer $KEY\"", name.c_str());
  std::fflush(stdout);

  const int signal_seen = wait_for_signal(http);
  std::fprintf(stderr, "kiln serve: %s received; finishing running requests (up to %.0f s)\n",
               signal_seen == SIGINT ? "SIGINT" : "SIGTERM", config.shutdown_grace_s);
  service.set_ready(false);
  http.stop_accepting();
  (*loop)->shutdown(config.shutdown_grace_s);
  // The loop has pushed every request's last event; let the connections write them.
  http.wait_idle(5.0);
  http.stop();
  std::fprintf(stderr, "kiln serve: stopped\n");
  return 0;
}

}  // namespace

CommandFn add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve an engine over HTTP: OpenAI- and KServe-compatible, with /metrics");
  cmd->add_option("engine", args->engine, "engine file (default: the bundled demo model, compiled once)");
  cmd->add_option("--model-repository", args->model_repository,
                  "serve the general (ONNX) models of a Triton-style repository: DIR/NAME/config.pbtxt and "
                  "DIR/NAME/VERSION/model.onnx or model.kiln (KServe v2 infer, dynamic batching)");
  cmd->add_option("--grpc-port", args->grpc_port,
                  "--model-repository: KServe v2 gRPC port (0: any free port, -1: no gRPC)")->capture_default_str();
  cmd->add_option("--engine-cache-dir", args->engine_cache_dir,
                  "where --model-repository keeps the engines it compiles from ONNX (default: ~/.cache/kiln/engines)");
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "port (0: any free port, printed when ready)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' (health endpoints stay open)");
  cmd->add_option("--api-key-file", args->api_key_file, "read the API key from this file");
  cmd->add_option("--allowed-hosts", args->allowed_hosts,
                  "Host header names to answer, comma-separated, any port; * for any (default: localhost, 127.0.0.1 "
                  "and [::1] when bound to loopback, else any); others get 403, against DNS rebinding")
      ->delimiter(',');
  cmd->add_option("--allowed-origins", args->allowed_origins,
                  "origins (scheme://host[:port], comma-separated; * for any) whose web pages may call the API "
                  "(CORS); by default no other site's pages may")
      ->delimiter(',');
  cmd->add_option("--served-model-name", args->served_model_name, "the model name clients use (default: the engine's file name)");
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "sequences in one step at most")->capture_default_str();
  cmd->add_option("--max-batch-tokens", args->max_batch_tokens, "tokens in one step at most (0: the engine's limit)");
  cmd->add_option("--gpu-memory-fraction", args->gpu_memory_fraction,
                  "cuda engines: the share of the GPU's memory kiln may hold; the KV cache takes what the weights "
                  "and activations leave of it (e.g. 0.9)");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                  "KV cache element: auto (bf16 for a bf16 engine, else fp32), fp32, bf16 (half the memory and the "
                  "bytes attention reads) or fp8 (e4m3, a quarter; rounds each element to 3 mantissa bits)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", args->kv_cache_memory, "KV cache size, e.g. 512MiB (default: enough for max-num-seqs full sequences, at most 1 GiB)");
  cmd->add_option("--max-queue", args->max_queue, "waiting requests at most; more get 429")->capture_default_str();
  cmd->add_option("--threads", args->threads, "compute threads (default: all cores)");
  cmd->add_option("--chat-template", args->chat_template, "Jinja chat template file, for a model without one");
  cmd->add_option("--tool-call-parser", args->tool_call_parser,
                  "how the model writes tool calls: hermes (<tool_call> blocks), llama3_json or mistral ([TOOL_CALLS]) "
                  "(default: the one its chat template teaches)");
  cmd->add_flag("--log-prompts", args->log_prompts, "put prompt text in the access log");
  cmd->add_flag("--no-ui", args->no_ui,
                "do not serve the playground (chat and live metrics in a browser) at /; it is open without the "
                "API key, and asks for the key to call the API");
  cmd->add_flag("--no-prefix-caching", args->no_prefix_caching, "do not share KV blocks between requests with a common prefix");
  cmd->add_option("--shutdown-grace", args->shutdown_grace, "seconds running requests get to finish on SIGTERM/SIGINT")->capture_default_str();
  cmd->add_option("--request-timeout", args->request_timeout, "seconds a request may take to arrive (and a connection may idle)")->capture_default_str();
  cmd->add_option("--stream-interval", args->stream_interval,
                  "streamed responses: write once this many tokens have gathered (the first token and a choice's "
                  "end go at once); more means fewer writes and system calls, in coarser pieces")
      ->capture_default_str();
  cmd->add_option("--network-threads", args->network_threads,
                  "threads for HTTP, JSON and streamed writes, at a lower priority than the model's (0, the default: 1 on "
                  "up to 4 cores, else 2)");
  cmd->add_option("--max-body-bytes", args->max_body_bytes, "largest request body; more gets 413")->capture_default_str();
  return [args] { return run_serve(*args); };
}

}  // namespace kiln::cli
