// Scheduler: decides, before every model step, which sequences advance by how many tokens, so
// that one ragged batch mixes decode tokens and prompt chunks within a token budget
// (max_batch_tokens) and a sequence limit (max_num_seqs). It holds the waiting queue (new and
// preempted sequences, oldest first) and the running list (sequences holding KV blocks, in
// admission order), and drives the KvBlockManager: each scheduled chunk's block table covers
// its positions before the step runs.
//
// One step, schedule():
//   1. decode: one token for each running sequence whose prompt is done, oldest first;
//   2. prefill: the remaining budget goes to running sequences still in their prompt, oldest
//      first, a chunk each (chunked prefill: a long prompt takes what is left after every
//      decode, so it never stalls the running streams);
//   3. admission: waiting sequences join, oldest first, while the budget, max_num_seqs and the
//      free blocks allow; a sequence whose leading full blocks are cached starts with its
//      context at the cached length, always leaving at least one token to compute so that the
//      step yields logits to sample from. Nothing is admitted in a step that preempted.
// When a decode token or a prompt chunk finds no block (a prompt chunk first shrinks to the
// blocks there are), the newest running sequence is preempted: its blocks are released, its
// context drops to zero and it goes to the front of the waiting queue, to be recomputed from
// its prompt and generated tokens (the prefix cache often still holds most of them). The
// oldest running sequence can always proceed, since admission (check_admissible) refused any
// sequence that could not fit in the whole pool by itself.
//
// complete_step() then records that the scheduled chunks ran: contexts advance and full blocks
// are committed to the prefix cache. The caller appends sampled tokens after that.
//
// Not thread-safe, except check_admissible(), which reads only the fixed configuration.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "base/status.h"
#include "llm/scheduling/kv_block_manager.h"
#include "llm/scheduling/sequence_state.h"

namespace kiln::llm {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;       // running sequences at most (also: sequences in one step)
  int64_t max_batch_tokens = 512;  // tokens in one step at most
  int64_t max_seq_len = 2048;      // the engine's longest sequence
};

// One sequence's share of a step: tokens[begin, begin + count) run with context_len = begin.
struct ScheduledChunk {
  SequenceState* seq = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
  bool all_logits = false;  // logits for every token (the prompt's logprobs), else for the last only
  bool samples = false;     // the chunk reaches the end of the known tokens: its last row is sampled
};

class Scheduler {
 public:
  // `blocks` must outlive the scheduler. config.max_num_seqs and max_batch_tokens must be >= 1.
  Scheduler(KvBlockManager& blocks, const SchedulerConfig& config);

  // Whether a sequence of `prompt_len` tokens that may generate `max_tokens` more can ever run:
  // kInvalidArgument, with a message for the user, when it exceeds max_seq_len or could not fit
  // in the whole KV pool alone. Safe from any thread.
  Status check_admissible(int64_t prompt_len, int64_t max_tokens) const;

  // Queues a sequence (tokens and prompt_len set; no blocks). `front`: ahead of every
  // waiting sequence (e.g. the further choices of a request whose first choice is running).
  void add(SequenceState* seq, bool front = false);
  // Takes a sequence out of whichever queue holds it and releases its blocks.
  void remove(SequenceState* seq);

  // Plans the next step (see above). The chunks stay valid until the next schedule().
  std::span<const ScheduledChunk> schedule();
  // The planned step ran: advances each chunk's sequence and commits its full blocks.
  void complete_step();

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return preemptions_; }
  const SchedulerConfig& config() const { return config_; }
  KvBlockManager& blocks() { return blocks_; }
  const KvBlockManager& blocks() const { return blocks_; }

 private:
  // Gives `seq` blocks for `count` more tokens, preempting the newest running sequences while
  // it must. A prompt chunk (`shrink`) takes fewer tokens rather than preempt. Returns the tokens
  // granted: 0 when `seq` itself was preempted.
  int64_t reserve(SequenceState* seq, int64_t count, bool shrink, int64_t& budget);
  void preempt(SequenceState* seq, int64_t& budget);
  void plan(SequenceState* seq, int64_t count);

  KvBlockManager& blocks_;
  SchedulerConfig config_;
  std::deque<SequenceState*> waiting_;
  std::vector<SequenceState*> running_;  // admission order: newest last
  std::vector<ScheduledChunk> plan_;
  int64_t preemptions_ = 0;
  bool preempted_this_step_ = false;
};

}  // namespace kiln::llm
