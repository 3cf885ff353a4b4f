// SequenceRunner: one sequence driven through an Executor — feed tokens in chunks (prefill),
// decode one token at a time, greedy generation. The runner owns the sequence's block table and
// returns its blocks to the cache when reset or destroyed. Used by `kiln eval`, `kiln bench` and
// the tests; the server's scheduler batches many sequences through the Executor directly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/executor.h"

namespace kiln::runtime {

class SequenceRunner {
 public:
  SequenceRunner(Executor& executor, KvCache& cache, int64_t vocab_size)
      : executor_(executor), cache_(cache), vocab_(vocab_size) {}
  ~SequenceRunner() { reset(); }
  SequenceRunner(const SequenceRunner&) = delete;
  SequenceRunner& operator=(const SequenceRunner&) = delete;

  // Appends `tokens` in steps of at most `chunk` tokens (0: as many as a step holds). Returns
  // logits [tokens.size(), vocab] if all_logits, else [1, vocab] for the last token.
  Expected<std::vector<float>> feed(std::span<const int32_t> tokens, bool all_logits, int64_t chunk = 0);
  // Appends `tokens` like feed() and returns the next token chosen from the last one's logits by
  // `sampling` (one row; device_sampling.h), -1 when that row has no finite logit. Steps before
  // the last choose greedily, and their choice is dropped.
  Expected<int32_t> feed_sampled(std::span<const int32_t> tokens, const SamplingBatch& sampling, int64_t chunk = 0);
  // Feeds the prompt, then appends the argmax token n_new times; returns the new tokens. The
  // argmax is taken on the device when the backend samples there.
  Expected<std::vector<int32_t>> greedy(std::span<const int32_t> prompt, int64_t n_new);

  int64_t length() const { return length_; }
  void reset();

 private:
  Executor& executor_;
  KvCache& cache_;
  int64_t vocab_;
  // Runs `tokens` in steps of at most `chunk` tokens, each through `run` (step, is it the last).
  template <typename Run>
  Status for_each_step(std::span<const int32_t> tokens, int64_t chunk, bool all_logits, Run run);

  std::vector<int32_t> table_;
  int64_t length_ = 0;
};

// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> row);

}  // namespace kiln::runtime
