// ServingLoop: many requests through one Executor, continuously batched. It owns the model's
// KV cache, the block manager (paged KV with automatic prefix caching) and the scheduler, and
// runs the step loop on a thread of its own:
//   each step: take new requests from the RequestQueue; drop cancelled ones (their blocks are
//   freed); let the scheduler pick, under the token budget (max_batch_tokens) and max_num_seqs,
//   decode tokens of running sequences and chunks of prompts (chunked prefill); run one
//   Executor::step over that ragged batch; sample, detokenise and stop-match each sequence that
//   finished its prompt; push the resulting events to each request's ResponseStream.
// Sampling: when the backend samples on its device (a GPU backend) and no chunk of the step needs
// the logits of every token (prompt logprobs), the step is Executor::step_sampled: token ids come
// back, and the logits of only the rows whose choices report token logprobs, which their Sampler
// samples here. Otherwise each choice's Sampler samples its logits row, the rows in parallel.
// When blocks run out, the newest running sequence is preempted (its blocks freed) and
// recomputed later; its output is the same as if it had never been preempted.
//
// Choices: a request with n > 1 runs n sequences. The first computes the prompt; the others join
// once it has, and (with prefix caching) find the prompt's full blocks in the cache.
// Prompt logprobs: the prompt is computed in full with logits for every token (never taken from
// the prefix cache), and one kPromptLogprobs event precedes the first kDelta.
// Errors: a request that fails on the loop thread (a step that the executor refuses, a row
// with no finite logit) ends with a kError event; the loop thread carries on with the others.
//
// Threads: submit(), stats(), set_step_observer() and shutdown() may be called from any thread;
// everything else runs on the loop thread, which is the only user of the executor while the
// engine lives. The executor (and the model and backend under it) and the tokenizer must
// outlive the loop; the loop owns the KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "llm/serving/request_queue.h"
#include "llm/tokenizers/tokenizer.h"
#include "runtime/executor.h"

namespace kiln::llm {

struct ServingOptions {
  int64_t max_num_seqs = 64;        // sequences in one step at most
  int64_t max_batch_tokens = 0;     // tokens in one step at most; 0 = the engine file's limit
  uint64_t kv_cache_bytes = 0;      // KV pool size; 0 = enough for max_num_seqs full-length sequences, capped at 1 GiB
  int64_t block_size = 16;          // positions per KV block
  runtime::KvCacheDtype kv_cache_dtype = runtime::KvCacheDtype::kF32;
  size_t max_queue = 256;           // requests waiting beyond the max_num_seqs slots at most; more are refused
  bool prefix_caching = true;
  // Runs first on the loop thread, before any step: per-thread runtime settings that the
  // creating thread cannot pass on (OpenMP's thread count, set by cpu::cpu_set_threads, is one).
  std::function<void()> on_loop_thread_start;
};

// A snapshot for /metrics and logs; counters only grow.
struct ServingStats {
  int64_t running = 0;              // sequences holding KV blocks
  int64_t waiting = 0;              // requests queued or preempted, not yet running
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;       // referenced by a running sequence
  int64_t prefix_queries = 0;       // prompt tokens looked up in the prefix cache
  int64_t prefix_hits = 0;          // ... of which were found there
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;        // prompt tokens computed (prefix-cache hits excluded)
  int64_t generated_tokens = 0;
  int64_t steps = 0;
  double step_seconds = 0;          // Executor::step time, summed over steps
  // The same over the steps that computed no prompt token (every row a generated token's).
  int64_t decode_steps = 0;
  int64_t decode_rows = 0;
  double decode_step_seconds = 0;
  // Loop-thread time outside Executor::step in steps that ran (scheduling, sampling,
  // detokenising, events), summed: its ratio to step_seconds is the loop's own overhead.
  double loop_seconds = 0;
  int64_t kv_blocks_cached = 0;     // unreferenced blocks kept for prefix hits
  int64_t requests_finished = 0;    // ended with kFinished
  int64_t requests_failed = 0;      // ended with kError (shut down included; cancelled ones not)
  int64_t requests_cancelled = 0;   // cancelled by their client (gone, or the request dropped)
};

class ServingLoop {
 public:
  // `eos_ids`: the model's end tokens (tokenizer and generation config). Starts the loop thread.
  // Options are checked here: kInvalidArgument when max_batch_tokens exceeds the engine file's
  // limit or the KV pool would not hold one block. Runs one one-token step to learn the model's
  // vocabulary.
  static Expected<std::unique_ptr<ServingLoop>> create(runtime::Executor& executor, const Tokenizer& tokenizer,
                                                         std::vector<int32_t> eos_ids, const ServingOptions& options);
  ~ServingLoop();  // shutdown(0) if still running

  // Admits a request. Errors: kInvalidArgument when prompt + max_tokens exceeds the loop's max
  // sequence length or could never fit in the KV cache (or the request is malformed:
  // no prompt, a token outside the vocabulary, n < 1, parameters that fail validate());
  // kResourceExhausted when max_num_seqs requests run and max_queue more wait already, or the loop
  // is shutting down.
  Expected<std::shared_ptr<ResponseStream>> submit(GenerationRequest request);

  ServingStats stats() const;
  // Step-time observer for histograms: called on the loop thread after every step with its
  // duration in seconds and the number of tokens it ran.
  void set_step_observer(std::function<void(double seconds, int64_t tokens)> observer);

  // Stops accepting; lets running and queued requests finish for up to `grace_seconds`, then
  // ends the rest with an error event; joins the loop thread.
  void shutdown(double grace_seconds);

  int64_t max_seq_len() const;
  int64_t vocab_size() const;
  // The options in force: zeros resolved, max_num_seqs at most max_batch_tokens.
  const ServingOptions& options() const;

 private:
  struct Impl;
  explicit ServingLoop(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::llm
