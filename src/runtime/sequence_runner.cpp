#include "runtime/sequence_runner.h"

#include <algorithm>

namespace kiln::runtime {

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

void SequenceRunner::reset() {
  cache_.kv_cache_free(table_);
  length_ = 0;
}

Expected<std::vector<float>> SequenceRunner::feed(std::span<const int32_t> tokens, bool all_logits, int64_t chunk) {
  if (tokens.empty()) return invalid_argument("nothing to feed");
  const int64_t step_max = chunk > 0 ? std::min(chunk, executor_.max_tokens()) : executor_.max_tokens();
  std::vector<float> out;
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(step_max));
    const bool last_chunk = begin + n == tokens.size();
    KILN_RETURN_IF_ERROR(cache_.kv_cache_reserve(table_, length_ + static_cast<int64_t>(n)));
    SequenceStep step;
    step.tokens = tokens.subspan(begin, n);
    step.context_len = length_;
    step.block_table = table_;
    step.all_logits = all_logits;
    KILN_ASSIGN_OR_RETURN(std::span<const float> logits, executor_.step({&step, 1}, cache_));
    if (all_logits || last_chunk) out.insert(out.end(), logits.begin(), logits.end());
    length_ += static_cast<int64_t>(n);
    begin += n;
  }
  return out;
}

Expected<std::vector<int32_t>> SequenceRunner::greedy(std::span<const int32_t> prompt, int64_t n_new) {
  KILN_ASSIGN_OR_RETURN(std::vector<float> logits, feed(prompt, false));
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n_new; ++i) {
    const int32_t next = argmax(logits);
    out.push_back(next);
    if (i + 1 == n_new) break;
    KILN_ASSIGN_OR_RETURN(logits, feed({&next, 1}, false));
  }
  return out;
}

}  // namespace kiln::runtime
