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
  // Feeds the prompt, then appends the argmax token n_new times; returns the new tokens.
  Expected<std::vector<int32_t>> greedy(std::span<const int32_t> prompt, int64_t n_new);

  int64_t length() const { return length_; }
  void reset();

 private:
  Executor& executor_;
  KvCache& cache_;
  int64_t vocab_;
  std::vector<int32_t> table_;
  int64_t length_ = 0;
};

// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> row);

}  // namespace kiln::runtime
