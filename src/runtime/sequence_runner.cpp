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

template <typename Run>
Status SequenceRunner::for_each_step(std::span<const int32_t> tokens, int64_t chunk, bool all_logits, Run run) {
  if (tokens.empty()) return invalid_argument("nothing to feed");
  const int64_t step_max = chunk > 0 ? std::min(chunk, executor_.max_tokens()) : executor_.max_tokens();
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(step_max));
    KILN_RETURN_IF_ERROR(cache_.kv_cache_reserve(table_, length_ + static_cast<int64_t>(n)));
    SequenceStep step;
    step.tokens = tokens.subspan(begin, n);
    step.context_len = length_;
    step.block_table = table_;
    step.all_logits = all_logits;
    KILN_RETURN_IF_ERROR(run(step, begin + n == tokens.size()));
    length_ += static_cast<int64_t>(n);
    begin += n;
  }
  return Status::ok();
}

Expected<std::vector<float>> SequenceRunner::feed(std::span<const int32_t> tokens, bool all_logits, int64_t chunk) {
  std::vector<float> out;
  KILN_RETURN_IF_ERROR(for_each_step(tokens, chunk, all_logits, [&](const SequenceStep& step, bool last) -> Status {
    KILN_ASSIGN_OR_RETURN(std::span<const float> logits, executor_.step({&step, 1}, cache_));
    if (all_logits || last) out.insert(out.end(), logits.begin(), logits.end());
    return Status::ok();
  }));
  return out;
}

Expected<int32_t> SequenceRunner::feed_sampled(std::span<const int32_t> tokens, const SamplingBatch& sampling,
                                               int64_t chunk) {
  SamplingBatch greedy;
  greedy.add_row();
  int32_t next = -1;
  KILN_RETURN_IF_ERROR(for_each_step(tokens, chunk, false, [&](const SequenceStep& step, bool last) -> Status {
    KILN_ASSIGN_OR_RETURN(const SampledStep out, executor_.step_sampled({&step, 1}, cache_, last ? sampling : greedy));
    next = out.ids[0];
    return Status::ok();
  }));
  return next;
}

Expected<std::vector<int32_t>> SequenceRunner::greedy(std::span<const int32_t> prompt, int64_t n_new) {
  const bool on_device = executor_.samples_on_device();
  SamplingBatch sampling;
  sampling.add_row();
  auto next_after = [&](std::span<const int32_t> tokens) -> Expected<int32_t> {
    if (on_device) return feed_sampled(tokens, sampling);
    KILN_ASSIGN_OR_RETURN(std::vector<float> logits, feed(tokens, false));
    return argmax(logits);
  };
  std::vector<int32_t> out;
  KILN_ASSIGN_OR_RETURN(int32_t next, next_after(prompt));
  for (int64_t i = 0; i < n_new; ++i) {
    out.push_back(next);
    if (i + 1 == n_new) break;
    KILN_ASSIGN_OR_RETURN(next, next_after({&next, 1}));
  }
  return out;
}

}  // namespace kiln::runtime
