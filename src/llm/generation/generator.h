// Generator: one sequence from prompt tokens to finished text — feed the prompt, then sample,
// detokenise incrementally and check stop conditions, one token at a time. It drives an Executor
// through a SequenceRunner, so it owns that sequence's KV blocks for the length of a call. Used
// by `kiln run`; the server batches many sequences with the same parts (Sampler, StopMatcher,
// StreamDecoder) through its scheduler.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llm/generation/sampler.h"
#include "llm/generation/stop_matcher.h"
#include "llm/tokenizers/tokenizer.h"
#include "runtime/executor.h"

namespace kiln::llm {

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens, stop tokens excluded
  std::string text;             // their text, stop strings excluded
  FinishReason finish = FinishReason::kNone;
  int64_t prompt_tokens = 0;
  double time_to_first_token_s = 0;  // prompt submitted -> first token sampled
  double decode_tokens_per_s = 0;    // tokens after the first, per second
};

class Generator {
 public:
  Generator(runtime::Executor& executor, runtime::KvCache& cache, const Tokenizer& tokenizer, int64_t vocab_size)
      : executor_(executor), cache_(cache), tokenizer_(tokenizer), vocab_(vocab_size) {}

  // on_text receives each piece of final text as soon as it is safe to show (never part of a
  // UTF-8 character, never text that may still turn out to be a stop string).
  Expected<GenerationResult> generate(std::span<const int32_t> prompt, const SamplingParams& params,
                                      std::span<const int32_t> eos_ids,
                                      const std::function<void(std::string_view)>& on_text);

 private:
  runtime::Executor& executor_;
  runtime::KvCache& cache_;
  const Tokenizer& tokenizer_;
  int64_t vocab_;
};

}  // namespace kiln::llm
