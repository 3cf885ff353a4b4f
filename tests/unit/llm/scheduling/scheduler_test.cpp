// The scheduler without a model: a "model" that writes (token, position) into a simulated KV
// pool and checks, before every chunk, that everything the chunk attends to holds exactly its
// sequence's tokens. That catches what a real model would show only as wrong text: a block
// shared while still being written, a prefix hit on the wrong contents, a preempted sequence
// resumed with a stale context.
#include "llm/scheduling/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>

namespace kiln::llm {
namespace {

struct Seq : SequenceState {
  int64_t max_tokens = 0;
  int64_t generated = 0;
  bool done = false;
};

// Deterministic next token of a sequence: depends only on its tokens so far.
int32_t next_token(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ULL;
  return static_cast<int32_t>(h % 1000);
}

class Harness {
 public:
  Harness(int64_t num_blocks, int64_t block_size, bool caching, SchedulerConfig config)
      : blocks_(num_blocks, block_size, caching),
        sched_(blocks_, config),
        kv_(static_cast<size_t>(num_blocks * block_size), {-1, -1}) {}

  Seq* add(std::vector<int32_t> prompt, int64_t max_tokens, bool prompt_logits = false) {
    auto s = std::make_unique<Seq>();
    s->prompt_len = static_cast<int64_t>(prompt.size());
    s->tokens = std::move(prompt);
    s->max_tokens = max_tokens;
    s->prompt_logits = prompt_logits;
    Seq* p = s.get();
    seqs_.push_back(std::move(s));
    sched_.add(p);
    return p;
  }

  void cancel(Seq* s) {
    sched_.remove(s);
    s->done = true;
  }

  // One step: schedule, check, "run", complete, sample. Returns the plan it ran.
  std::vector<ScheduledChunk> step() {
    const auto plan_span = sched_.schedule();
    std::vector<ScheduledChunk> plan(plan_span.begin(), plan_span.end());
    check_plan(plan);
    for (const ScheduledChunk& c : plan) run_chunk(c);
    sched_.complete_step();
    for (const ScheduledChunk& c : plan) {
      auto* s = static_cast<Seq*>(c.seq);
      EXPECT_EQ(s->num_computed, c.begin + c.count);
      if (!c.samples) continue;
      EXPECT_EQ(s->num_computed, static_cast<int64_t>(s->tokens.size()));
      const int32_t t = next_token(s->tokens);
      ++s->generated;
      if (s->generated >= s->max_tokens) {
        sched_.remove(s);
        s->done = true;
        s->tokens.push_back(t);  // kept for the final comparison; never fed
      } else {
        s->tokens.push_back(t);
      }
    }
    check_state();
    return plan;
  }

  void check_plan(const std::vector<ScheduledChunk>& plan) {
    const SchedulerConfig& cfg = sched_.config();
    int64_t tokens = 0;
    std::set<const SequenceState*> seen;
    for (const ScheduledChunk& c : plan) {
      ASSERT_GT(c.count, 0);
      ASSERT_TRUE(seen.insert(c.seq).second) << "a sequence twice in one step";
      ASSERT_EQ(c.begin, c.seq->num_computed);
      ASSERT_LE(c.begin + c.count, static_cast<int64_t>(c.seq->tokens.size()));
      ASSERT_EQ(c.samples, c.begin + c.count == static_cast<int64_t>(c.seq->tokens.size()));
      ASSERT_GE(static_cast<int64_t>(c.seq->blocks.blocks.size()) * blocks_.block_size(), c.begin + c.count);
      ASSERT_EQ(c.seq->queue, SequenceState::Queue::kRunning);
      if (c.seq->prompt_logits) {
        ASSERT_TRUE(c.all_logits || c.begin >= c.seq->prompt_len);
      }
      tokens += c.count;
    }
    ASSERT_LE(tokens, cfg.max_batch_tokens);
    ASSERT_LE(static_cast<int64_t>(plan.size()), cfg.max_num_seqs);
    ASSERT_LE(sched_.num_running(), cfg.max_num_seqs);
  }

  // Checks the context, then writes the chunk's positions. A block written here must not be
  // shared with any other sequence.
  void run_chunk(const ScheduledChunk& c) {
    const int64_t bs = blocks_.block_size();
    const auto& table = c.seq->blocks.blocks;
    for (int64_t p = 0; p < c.begin; ++p) {
      const auto slot = kv_[static_cast<size_t>(table[static_cast<size_t>(p / bs)] * bs + p % bs)];
      ASSERT_EQ(slot.first, c.seq->tokens[static_cast<size_t>(p)]) << "wrong context at position " << p;
      ASSERT_EQ(slot.second, p);
    }
    for (int64_t p = c.begin; p < c.begin + c.count; ++p) {
      const int32_t block = table[static_cast<size_t>(p / bs)];
      ASSERT_EQ(blocks_.ref_count(block), 1) << "writing into a shared block";
      kv_[static_cast<size_t>(block * bs + p % bs)] = {c.seq->tokens[static_cast<size_t>(p)], p};
    }
  }

  // Reference counts equal the number of live tables listing each block; the manager's own
  // invariants hold; waiting sequences hold no blocks.
  void check_state() {
    ASSERT_TRUE(blocks_.verify()) << blocks_.verify().message();
    std::map<int32_t, int32_t> refs;
    for (const auto& s : seqs_) {
      if (s->done) {
        ASSERT_TRUE(s->blocks.blocks.empty());
        continue;
      }
      if (s->queue == SequenceState::Queue::kWaiting) {
        ASSERT_TRUE(s->blocks.blocks.empty());
      }
      for (int32_t b : s->blocks.blocks) ++refs[b];
    }
    for (int32_t b = 0; b < blocks_.num_blocks(); ++b) {
      ASSERT_EQ(blocks_.ref_count(b), refs.contains(b) ? refs[b] : 0) << "block " << b;
    }
  }

  bool all_done() const {
    for (const auto& s : seqs_) {
      if (!s->done) return false;
    }
    return true;
  }

  // Runs until every sequence is done; fails after `max_steps`.
  void drain(int max_steps = 100000) {
    for (int i = 0; i < max_steps && !all_done(); ++i) {
      step();
      if (::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_TRUE(all_done()) << "no progress";
  }

  KvBlockManager& blocks() { return blocks_; }
  Scheduler& sched() { return sched_; }
  const std::vector<std::unique_ptr<Seq>>& seqs() const { return seqs_; }

 private:
  KvBlockManager blocks_;
  Scheduler sched_;
  std::vector<std::pair<int32_t, int64_t>> kv_;  // [num_blocks * block_size]: (token, position)
  std::vector<std::unique_ptr<Seq>> seqs_;
};

std::vector<int32_t> prompt_of(int32_t n, int32_t salt) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = (i * 7 + salt * 131) % 1000;
  return p;
}

// What a sequence ends as when run alone: prompt, then max_tokens deterministic tokens.
std::vector<int32_t> expected_tokens(std::vector<int32_t> prompt, int64_t max_tokens) {
  for (int64_t i = 0; i < max_tokens; ++i) prompt.push_back(next_token(prompt));
  return prompt;
}

TEST(Scheduler, AdmissionRefusesWhatCanNeverFit) {
  KvBlockManager blocks(10, 4, true);  // 40 positions
  Scheduler s(blocks, {8, 64, 100});
  EXPECT_TRUE(s.check_admissible(10, 20));
  EXPECT_TRUE(s.check_admissible(20, 21));   // 40 positions: the last token is never fed
  Status pool = s.check_admissible(20, 22);  // 41
  EXPECT_EQ(pool.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pool.message().find("KV cache"), std::string::npos) << pool.message();
  KvBlockManager big(1000, 4, true);
  Scheduler s2(big, {8, 64, 100});
  Status len = s2.check_admissible(60, 41);
  EXPECT_EQ(len.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(len.message().find("maximum sequence length of 100"), std::string::npos) << len.message();
  EXPECT_TRUE(s2.check_admissible(60, 40));
  EXPECT_FALSE(s2.check_admissible(100, 1));
  EXPECT_FALSE(s2.check_admissible(0, 1));
}

TEST(Scheduler, ChunkedPrefillNeverStallsDecodes) {
  Harness h(100, 4, true, {8, 16, 512});
  Seq* a = h.add(prompt_of(3, 1), 50);
  Seq* b = h.add(prompt_of(3, 2), 50);
  h.step();  // both prompts
  h.step();  // both decoding
  Seq* big = h.add(prompt_of(100, 3), 5);
  for (int i = 0; i < 6; ++i) {
    const auto plan = h.step();
    int64_t a_tokens = 0, b_tokens = 0, big_tokens = 0;
    for (const auto& c : plan) {
      if (c.seq == a) a_tokens = c.count;
      if (c.seq == b) b_tokens = c.count;
      if (c.seq == big) big_tokens = c.count;
    }
    EXPECT_EQ(a_tokens, 1);
    EXPECT_EQ(b_tokens, 1);
    EXPECT_EQ(big_tokens, std::min<int64_t>(14, 100 - 14 * i)) << "step " << i;
  }
  h.drain();
}

TEST(Scheduler, NewSequencesJoinAtTheNextStep) {
  Harness h(100, 4, true, {8, 64, 512});
  h.add(prompt_of(5, 1), 10);
  h.step();
  Seq* late = h.add(prompt_of(7, 2), 10);
  const auto plan = h.step();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[1].seq, late);
  EXPECT_EQ(plan[1].count, 7);
  EXPECT_TRUE(plan[1].samples);
}

TEST(Scheduler, MaxNumSeqsAndBudgetAreRespected) {
  Harness h(200, 4, true, {3, 10, 512});
  for (int i = 0; i < 8; ++i) h.add(prompt_of(6, i), 4);
  for (int i = 0; i < 200 && !h.all_done(); ++i) {
    const auto plan = h.step();  // check_plan asserts the limits
    if (HasFatalFailure()) return;
    EXPECT_LE(h.sched().num_running(), 3);
  }
  EXPECT_TRUE(h.all_done());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(h.seqs()[static_cast<size_t>(i)]->tokens, expected_tokens(prompt_of(6, i), 4));
}

TEST(Scheduler, PrefixHitStartsAtTheCachedLengthButComputesTheLastToken) {
  Harness h(100, 4, true, {8, 64, 512});
  Seq* a = h.add(prompt_of(16, 5), 3);
  h.step();
  Seq* b = h.add(prompt_of(16, 5), 3);  // 16 = 4 full blocks; at most 15 tokens may be skipped
  const auto plan = h.step();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[1].seq, b);
  EXPECT_EQ(plan[1].begin, 12);
  EXPECT_EQ(plan[1].count, 4);
  EXPECT_EQ(b->cached_prompt_tokens, 12);
  EXPECT_EQ(b->blocks.blocks[0], a->blocks.blocks[0]);
  EXPECT_EQ(h.blocks().stats().prefix_hits, 12);
  h.drain();
  EXPECT_EQ(a->tokens, b->tokens);

  // Prompt logits: computed in full, never from the cache.
  Seq* c = h.add(prompt_of(16, 5), 1, true);
  const auto plan_c = h.step();
  ASSERT_EQ(plan_c.size(), 1u);
  EXPECT_EQ(plan_c[0].begin, 0);
  EXPECT_TRUE(plan_c[0].all_logits);
  EXPECT_EQ(c->cached_prompt_tokens, 0);
}

TEST(Scheduler, PreemptsTheNewestAndResumesIt) {
  // 6 blocks of 4: two sequences of 4 + 12 tokens need 8 blocks together.
  Harness h(6, 4, true, {8, 64, 512});
  Seq* a = h.add(prompt_of(4, 1), 12);
  Seq* b = h.add(prompt_of(4, 2), 12);
  h.drain();
  if (HasFatalFailure()) return;
  EXPECT_GT(h.sched().num_preemptions(), 0);
  EXPECT_EQ(a->num_preemptions, 0);
  EXPECT_GT(b->num_preemptions, 0);
  EXPECT_EQ(a->tokens, expected_tokens(prompt_of(4, 1), 12));
  EXPECT_EQ(b->tokens, expected_tokens(prompt_of(4, 2), 12));
}

TEST(Scheduler, PreemptionWithoutPrefixCachingRecomputes) {
  Harness h(6, 4, false, {8, 5, 512});
  Seq* a = h.add(prompt_of(9, 1), 10);
  Seq* b = h.add(prompt_of(7, 2), 10);
  Seq* c = h.add(prompt_of(3, 3), 10);
  h.drain();
  if (HasFatalFailure()) return;
  EXPECT_GT(h.sched().num_preemptions(), 0);
  EXPECT_EQ(a->tokens, expected_tokens(prompt_of(9, 1), 10));
  EXPECT_EQ(b->tokens, expected_tokens(prompt_of(7, 2), 10));
  EXPECT_EQ(c->tokens, expected_tokens(prompt_of(3, 3), 10));
}

TEST(Scheduler, RemoveFreesBlocksWherever) {
  Harness h(20, 4, true, {1, 64, 512});
  Seq* a = h.add(prompt_of(10, 1), 50);
  Seq* b = h.add(prompt_of(10, 2), 50);  // waits: max_num_seqs 1
  h.step();
  EXPECT_EQ(a->queue, SequenceState::Queue::kRunning);
  EXPECT_EQ(b->queue, SequenceState::Queue::kWaiting);
  h.cancel(b);
  h.cancel(a);
  EXPECT_EQ(h.blocks().stats().used, 0);
  EXPECT_EQ(h.sched().num_running(), 0);
  EXPECT_EQ(h.sched().num_waiting(), 0);
  EXPECT_TRUE(h.sched().schedule().empty());
}

// Thousands of steps of random arrivals, shared prefixes, cancellations and a pool small enough
// to preempt; the harness checks every invariant after every step, and every sequence that ran
// to the end must equal its run alone.
TEST(Scheduler, RandomisedInvariants) {
  for (const bool caching : {true, false}) {
    std::mt19937 rng(caching ? 1234 : 99);
    Harness h(24, 4, caching, {6, 20, 64});
    const std::vector<std::vector<int32_t>> prefixes = {prompt_of(8, 1), prompt_of(13, 2), prompt_of(4, 3)};
    std::map<const Seq*, std::vector<int32_t>> expected;
    int steps = 0;
    for (; steps < 4000; ++steps) {
      if (rng() % 3 == 0) {
        std::vector<int32_t> prompt = prefixes[rng() % prefixes.size()];
        const auto extra = static_cast<int32_t>(rng() % 12);
        for (int32_t i = 0; i < extra; ++i) prompt.push_back(static_cast<int32_t>(rng() % 1000));
        const int64_t max_tokens = 1 + static_cast<int64_t>(rng() % 30);
        if (!h.sched().check_admissible(static_cast<int64_t>(prompt.size()), max_tokens)) continue;
        Seq* s = h.add(prompt, max_tokens, rng() % 7 == 0);
        expected[s] = expected_tokens(prompt, max_tokens);
      }
      if (rng() % 25 == 0) {
        for (const auto& s : h.seqs()) {
          if (!s->done && rng() % 4 == 0) {
            h.cancel(s.get());
            expected.erase(s.get());
            break;
          }
        }
      }
      h.step();
      if (HasFatalFailure()) return;
    }
    h.drain();
    if (HasFatalFailure()) return;
    for (const auto& [s, tokens] : expected) EXPECT_EQ(s->tokens, tokens);
    EXPECT_GT(h.sched().num_preemptions(), 0) << "the pool should be small enough to preempt";
    if (caching) {
      EXPECT_GT(h.blocks().stats().prefix_hits, 0);
    }
    EXPECT_EQ(h.blocks().stats().used, 0);
  }
}

}  // namespace
}  // namespace kiln::llm
