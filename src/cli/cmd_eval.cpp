// kiln eval ENGINE --ids 1,2,3 [--logits-out F.npy] [--generate N] [--chunk N] [--kv-cache-dtype fp32]
// kiln eval ENGINE --text FILE [--window N] [--kv-cache-dtype fp32]   perplexity (windowing: see llm/perplexity.h)
// kiln eval ENGINE --input NAME=FILE.npy ... --outputs-dir DIR [--repeat N]   general graphs (cmd_eval_tensors.cpp)
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/npy.h"
#include "llm/generation/perplexity.h"
#include "llm/tokenizers/tokenizer.h"
#include "runtime/sequence_runner.h"

namespace kiln::cli {
namespace {

struct EvalArgs {
  std::string engine, ids, logits_out, text, outputs_dir, kv_cache_dtype = "fp32";
  std::vector<std::string> inputs;
  int64_t generate = 0, chunk = 0, window = 0;
  int threads = 0, repeat = 0;
};

int run_perplexity(const EvalArgs& a, std::optional<runtime::KvCacheDtype> kv_dtype) {
  auto text = read_text_file(a.text);
  if (!text) return fail(text.status());
  auto session = open_session(a.engine, a.threads, INT64_MAX, kv_dtype);
  if (!session) return fail(session.status());
  auto tokenizer = llm::tokenizer_from_files(session->model->files());
  if (!tokenizer) return fail(tokenizer.status());
  auto tokens = (*tokenizer)->encode(*text, false);
  if (!tokens) return fail(tokens.status());
  const int64_t window = a.window > 0 ? a.window : std::min<int64_t>(512, session->model->facts().max_seq_len);
  if (window > session->model->facts().max_seq_len) {
    return fail(invalid_argument("--window exceeds the engine's max sequence length"));
  }
  const int64_t vocab = session->model->facts().vocab_size;
  auto r = llm::perplexity(*session->executor, *session->cache, vocab, *tokens, window, (*tokenizer)->bos_id());
  if (!r) return fail(r.status());
  std::printf("perplexity %.4f  (%lld tokens scored, %lld windows of %lld tokens%s, mean NLL %.4f nats)\n",
              r->perplexity(), static_cast<long long>(r->tokens_scored), static_cast<long long>(r->windows),
              static_cast<long long>(window), (*tokenizer)->bos_id() ? " incl. BOS" : "",
              r->nll_sum / static_cast<double>(r->tokens_scored));
  return 0;
}

int run_eval(const EvalArgs& a) {
  if (!a.inputs.empty() || !a.outputs_dir.empty()) return run_eval_tensors(a.engine, a.inputs, a.outputs_dir, a.threads, a.repeat);
  auto kv_dtype = runtime::parse_kv_cache_dtype_choice(a.kv_cache_dtype);
  if (!kv_dtype) return fail(kv_dtype.status().with_context("--kv-cache-dtype"));
  if (!a.text.empty()) return run_perplexity(a, *kv_dtype);
  if (a.ids.empty()) return fail(invalid_argument("give --ids or --text"));
  auto ids = parse_id_list(a.ids);
  if (!ids) return fail(ids.status());
  auto session = open_session(a.engine, a.threads, static_cast<int64_t>(ids->size()) + a.generate, *kv_dtype);
  if (!session) return fail(session.status());
  const int64_t vocab = session->model->facts().vocab_size;
  runtime::SequenceRunner runner(*session->executor, *session->cache, vocab);
  auto logits = runner.feed(*ids, true, a.chunk);
  if (!logits) return fail(logits.status());
  if (!a.logits_out.empty()) {
    Status st = npy_write_f32(a.logits_out, *logits, {static_cast<int64_t>(ids->size()), vocab});
    if (!st) return fail(st);
  }
  std::printf("next token after position %zu: %d\n", ids->size() - 1,
              runtime::argmax(std::span<const float>(*logits).last(static_cast<size_t>(vocab))));
  if (a.generate > 0) {
    runner.reset();
    auto out = runner.greedy(*ids, a.generate);
    if (!out) return fail(out.status());
    std::printf("greedy:");
    for (size_t i = 0; i < out->size(); ++i) std::printf("%s%d", i ? "," : " ", (*out)[i]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

CommandFn add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Run token ids through an engine; write next-token logits");
  cmd->add_option("engine", args->engine, "engine file")->required();
  auto* ids = cmd->add_option("--ids", args->ids, "comma-separated token ids");
  auto* text = cmd->add_option("--text", args->text, "text file: print its perplexity");
  ids->excludes(text);
  cmd->add_option("--window", args->window, "perplexity window in tokens (default: min(512, max seq len))");
  cmd->add_option("--logits-out", args->logits_out, "write float32 logits [num_tokens, vocab] as .npy");
  cmd->add_option("--generate", args->generate, "also print N greedily generated token ids");
  cmd->add_option("--chunk", args->chunk, "prefill in steps of at most N tokens");
  cmd->add_option("--threads", args->threads, "threads (default: all cores)");
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                  "KV cache element: fp32 (exact), bf16, fp8 (e4m3), or auto (the engine's own, as kiln serve)")
      ->capture_default_str();
  cmd->add_option("--input", args->inputs, "general engines: NAME=FILE.npy, one per graph input");
  cmd->add_option("--outputs-dir", args->outputs_dir, "general engines: write each output as DIR/NAME.npy");
  cmd->add_option("--repeat", args->repeat, "general engines: run N more times and print the latency");
  return [args] { return run_eval(*args); };
}

}  // namespace kiln::cli
