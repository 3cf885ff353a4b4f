// Perplexity of a token sequence under a loaded engine, for `kiln eval --text`.
//
// Windowing: the tokens are cut into consecutive, non-overlapping chunks of (window - 1) tokens
// when the tokenizer has a BOS token, each evaluated from a fresh context as BOS + chunk, so every
// token of the text is scored exactly once and no window sees another's context. Without a BOS,
// chunks are `window` tokens and each chunk's first token is not scored. This is the usual
// "non-overlapping windows" measure; it is higher than a sliding-window measure that gives every
// token a long context.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "runtime/executor.h"

namespace kiln::llm {

struct PerplexityResult {
  double nll_sum = 0.0;        // sum of -log p(token | context), natural log
  int64_t tokens_scored = 0;
  int64_t windows = 0;
  double perplexity() const;
};

Expected<PerplexityResult> perplexity(runtime::Executor& executor, runtime::KvCache& cache, int64_t vocab_size,
                                      std::span<const int32_t> tokens, int64_t window, std::optional<int32_t> bos);

}  // namespace kiln::llm
