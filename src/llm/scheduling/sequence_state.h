// SequenceState: what the scheduler knows of one sequence (one choice of one request): its
// tokens, how many of them are in the KV cache, and its block table. The serving loop owns
// each SequenceState (it derives its per-choice state from it) and appends each sampled token
// to `tokens`; the scheduler alone moves `num_computed` and the block table, between its
// schedule() and complete_step() calls, and must be told (Scheduler::remove) before a
// SequenceState it holds is destroyed.
#pragma once

#include <cstdint>
#include <vector>

#include "llm/scheduling/kv_block_manager.h"

namespace kiln::llm {

struct SequenceState {
  virtual ~SequenceState() = default;

  // The prompt, then every sampled token. tokens[num_computed, size) still have to run through
  // the model: the rest of the prompt, or (once generating) the one token sampled last.
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  // Tokens whose K/V are in the cache: the context_len of this sequence's next step.
  int64_t num_computed = 0;
  // The engine needs the logits of every prompt token (prompt logprobs): the prompt is computed
  // in full, never taken from the prefix cache. The engine clears it once it has them.
  bool prompt_logits = false;

  KvBlockTable blocks;
  // Prompt tokens found in the prefix cache when the sequence was first admitted.
  int64_t cached_prompt_tokens = 0;
  int64_t num_preemptions = 0;

  // Scheduler bookkeeping.
  enum class Queue { kNone, kWaiting, kRunning };
  Queue queue = Queue::kNone;
  bool admitted_once = false;
};

}  // namespace kiln::llm
