// Random prompts for a serving benchmark, in the manner of vLLM's random dataset: input and output
// lengths drawn uniformly from [len * (1 - ratio), len * (1 + ratio)], prompt tokens drawn
// uniformly from the model's vocabulary, special tokens left out. The same seed and tokenizer give
// the same prompts, so two servers can be driven with identical work.
//
// Token-id prompts (as_text == false) have exactly the drawn length and suit /v1/completions on
// Kiln and llama-server alike. Chat requests need text: the ids are decoded, and the prompt's
// length is what the tokenizer makes of that text again (close to, not always equal to, the draw).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "cli/bench_serve/bench_dataset.h"
#include "llm/tokenizers/tokenizer.h"

namespace kiln::cli::bench_serve {

struct RandomSpec {
  int64_t num_prompts = 0;
  int64_t input_len = 0;
  int64_t output_len = 0;
  double range_ratio = 0;  // in [0, 1)
  uint64_t seed = 0;
  bool as_text = false;
};

Expected<std::vector<BenchPrompt>> random_dataset(const RandomSpec& spec, const llm::Tokenizer& tokenizer);

}  // namespace kiln::cli::bench_serve
