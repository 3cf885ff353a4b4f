// ServingEngine: many requests through one Executor, continuously batched. It owns the model's
// KV cache, the block manager (paged KV with automatic prefix caching) and the scheduler, and
// runs the step loop on a thread of its own:
//   each step: take new requests from the RequestQueue; drop cancelled ones (their blocks are
//   freed); let the scheduler pick, under the token budget (max_batch_tokens) and max_num_seqs,
//   decode tokens of running sequences and chunks of prompts (chunked prefill); run one
//   Executor::step over that ragged batch; sample, detokenise and stop-match each sequence that
//   finished its prompt; push the resulting events to each request's ResponseStream.
// When blocks run out, the newest running sequence is preempted (its blocks freed) and
// recomputed later; its output is the same as if it had never been preempted.
//
// Threads: submit(), stats() and shutdown() may be called from any thread; everything else
// runs on the engine thread. The model, backend and tokenizer must outlive the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <thread>
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
  size_t max_queue = 256;           // waiting requests at most; beyond that submit() refuses
  bool prefix_caching = true;
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
  double step_seconds = 0;          // summed over steps
};

class ServingEngine {
 public:
  // `eos_ids`: the model's end tokens (tokenizer and generation config). Starts the engine thread.
  static Expected<std::unique_ptr<ServingEngine>> create(runtime::Executor& executor, runtime::Backend& backend,
                                                         const Tokenizer& tokenizer, std::vector<int32_t> eos_ids,
                                                         const ServingOptions& options);
  ~ServingEngine();  // shutdown(0) if still running

  // Admits a request. Errors: kInvalidArgument when the prompt (plus max_tokens) exceeds the
  // engine's max sequence length or could never fit in the KV cache; kResourceExhausted when the
  // wait queue is full or the engine is shutting down.
  Expected<std::shared_ptr<ResponseStream>> submit(GenerationRequest request);

  ServingStats stats() const;
  // Step-time observer for histograms: called on the engine thread after every step with its
  // duration in seconds and the number of tokens it ran.
  void set_step_observer(std::function<void(double seconds, int64_t tokens)> observer);

  // Stops accepting; lets running and queued requests finish for up to `grace_seconds`, then
  // ends the rest with an error event; joins the engine thread.
  void shutdown(double grace_seconds);

  int64_t max_seq_len() const;
  int64_t vocab_size() const;
};

}  // namespace kiln::llm
