#pragma once
// The one order in which sampling and log-probabilities rank a row's tokens.

#include <cstdint>
#include <limits>

namespace kiln::llm {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

// Strict order "more likely first, then lower id": a total order, so results never depend on the
// order the standard library happens to visit elements in.
inline bool more_likely(float a_logit, int32_t a_id, float b_logit, int32_t b_id) {
  return a_logit > b_logit || (a_logit == b_logit && a_id < b_id);
}

}  // namespace kiln::llm
