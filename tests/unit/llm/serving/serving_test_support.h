// Helpers shared by the serving tests.
#pragma once

#include <cstdint>

#include "llm/generation/sampling_params.h"

namespace kiln::llm::testing {

// Greedy parameters generating up to `max_tokens` tokens.
inline SamplingParams greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

}  // namespace kiln::llm::testing
