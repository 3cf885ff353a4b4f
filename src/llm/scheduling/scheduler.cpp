#include "llm/scheduling/scheduler.h"

#include <algorithm>
#include <string>

namespace kiln::llm {
namespace {

int64_t pending_tokens(const SequenceState& seq) {
  return static_cast<int64_t>(seq.tokens.size()) - seq.num_computed;
}

}  // namespace

Scheduler::Scheduler(KvBlockManager& blocks, const SchedulerConfig& config) : blocks_(blocks), config_(config) {
  KILN_CHECK(config_.max_num_seqs >= 1 && config_.max_batch_tokens >= 1 && config_.max_seq_len >= 1);
  // Every running sequence must be able to decode in every step, or the newest would starve.
  config_.max_num_seqs = std::min(config_.max_num_seqs, config_.max_batch_tokens);
  running_.reserve(static_cast<size_t>(config_.max_num_seqs));
  plan_.reserve(static_cast<size_t>(config_.max_num_seqs));
}

Status Scheduler::check_admissible(int64_t prompt_len, int64_t max_tokens) const {
  const std::string limit = std::to_string(config_.max_seq_len);
  if (prompt_len < 1) return invalid_argument("the prompt has no tokens");
  if (prompt_len >= config_.max_seq_len) {
    return invalid_argument("the prompt has " + std::to_string(prompt_len) +
                            " tokens, which leaves no room to generate within this engine's maximum sequence length of " +
                            limit + " tokens");
  }
  if (prompt_len + max_tokens > config_.max_seq_len) {
    return invalid_argument("the prompt's " + std::to_string(prompt_len) + " tokens plus max_tokens " +
                            std::to_string(max_tokens) + " exceed this engine's maximum sequence length of " + limit +
                            " tokens; ask for at most " + std::to_string(config_.max_seq_len - prompt_len) +
                            " new tokens");
  }
  // The last generated token is never fed back, so it needs no cache position.
  const int64_t need = blocks_.blocks_for(prompt_len + max_tokens - 1);
  if (need > blocks_.num_blocks()) {
    const int64_t fits = blocks_.num_blocks() * blocks_.block_size();
    return invalid_argument("the prompt's " + std::to_string(prompt_len) + " tokens plus max_tokens " +
                            std::to_string(max_tokens) + " need more KV cache than the server has (" +
                            std::to_string(fits) + " positions); ask for fewer tokens");
  }
  return Status::ok();
}

void Scheduler::add(SequenceState* seq, bool front) {
  KILN_CHECK(seq->queue == SequenceState::Queue::kNone && seq->blocks.blocks.empty());
  KILN_CHECK(seq->prompt_len >= 1 && static_cast<int64_t>(seq->tokens.size()) >= seq->prompt_len);
  seq->num_computed = 0;
  seq->queue = SequenceState::Queue::kWaiting;
  if (front) {
    waiting_.push_front(seq);
  } else {
    waiting_.push_back(seq);
  }
}

void Scheduler::remove(SequenceState* seq) {
  if (seq->queue == SequenceState::Queue::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  } else if (seq->queue == SequenceState::Queue::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  }
  std::erase_if(plan_, [&](const ScheduledChunk& c) { return c.seq == seq; });
  blocks_.release(seq->blocks);
  seq->queue = SequenceState::Queue::kNone;
}

void Scheduler::preempt(SequenceState* seq, int64_t& budget) {
  for (auto it = plan_.begin(); it != plan_.end(); ++it) {
    if (it->seq == seq) {
      budget += it->count;
      plan_.erase(it);
      break;
    }
  }
  blocks_.release(seq->blocks);
  seq->num_computed = 0;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.push_front(seq);
  seq->queue = SequenceState::Queue::kWaiting;
  ++seq->num_preemptions;
  ++preemptions_;
  preempted_this_step_ = true;
}

int64_t Scheduler::reserve(SequenceState* seq, int64_t count, bool shrink, int64_t& budget) {
  while (true) {
    if (blocks_.allocate(seq->blocks, seq->num_computed + count)) return count;
    if (shrink) {
      const int64_t room =
          (static_cast<int64_t>(seq->blocks.blocks.size()) + blocks_.available_blocks()) * blocks_.block_size() -
          seq->num_computed;
      if (room > 0) {
        KILN_CHECK(blocks_.allocate(seq->blocks, seq->num_computed + room));
        return room;
      }
    }
    SequenceState* victim = running_.back();
    preempt(victim, budget);
    if (victim == seq) return 0;
  }
}

void Scheduler::plan(SequenceState* seq, int64_t count) {
  ScheduledChunk chunk;
  chunk.seq = seq;
  chunk.begin = seq->num_computed;
  chunk.count = count;
  chunk.all_logits = seq->prompt_logits && chunk.begin < seq->prompt_len;
  chunk.samples = chunk.begin + count == static_cast<int64_t>(seq->tokens.size());
  plan_.push_back(chunk);
}

std::span<const ScheduledChunk> Scheduler::schedule() {
  plan_.clear();
  preempted_this_step_ = false;
  int64_t budget = config_.max_batch_tokens;

  // 1. One token for every sequence that is generating (or has one prompt token left).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    SequenceState* seq = running_[i];
    if (pending_tokens(*seq) != 1) continue;
    if (reserve(seq, 1, false, budget) == 1) {
      plan(seq, 1);
      budget -= 1;
    }
  }
  // 2. Prompt chunks (and recomputation after preemption) from what is left.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    SequenceState* seq = running_[i];
    const int64_t pending = pending_tokens(*seq);
    if (pending <= 1) continue;
    const int64_t got = reserve(seq, std::min(pending, budget), true, budget);
    if (got > 0) {
      plan(seq, got);
      budget -= got;
    }
  }
  // 3. Admission.
  while (!preempted_this_step_ && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    SequenceState* seq = waiting_.front();
    const auto known = static_cast<int64_t>(seq->tokens.size());
    int64_t queried = 0, matched = 0;
    seq->num_computed = 0;
    if (blocks_.prefix_caching() && !seq->prompt_logits) {
      // Never the last token: it must run to give logits.
      queried = known - 1;
      matched = blocks_.acquire_prefix(seq->blocks, std::span<const int32_t>(seq->tokens).first(static_cast<size_t>(queried)));
      seq->num_computed = matched;
    }
    const int64_t count = std::min(known - seq->num_computed, budget);
    if (!blocks_.allocate(seq->blocks, seq->num_computed + count)) {
      // Wait for blocks; the sequences behind wait too (first come, first served).
      blocks_.release(seq->blocks);
      seq->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    running_.push_back(seq);
    seq->queue = SequenceState::Queue::kRunning;
    blocks_.record_prefix_lookup(queried, matched);
    if (!seq->admitted_once) {
      seq->admitted_once = true;
      seq->cached_prompt_tokens = std::min(matched, seq->prompt_len);
    }
    plan(seq, count);
    budget -= count;
  }
  return plan_;
}

void Scheduler::complete_step() {
  for (const ScheduledChunk& chunk : plan_) {
    SequenceState* seq = chunk.seq;
    seq->num_computed = chunk.begin + chunk.count;
    blocks_.commit(seq->blocks, seq->tokens, seq->num_computed);
  }
}

}  // namespace kiln::llm
