#include "runtime/backend.h"

namespace kiln::runtime {

Expected<std::span<const int32_t>> Backend::run_step_sampled(const StepView& step, const SamplingBatch& sampling) {
  KILN_ASSIGN_OR_RETURN(std::span<const float> logits, run_step(step));
  const auto rows = static_cast<size_t>(step.num_rows);
  const size_t vocab = rows == 0 ? 0 : logits.size() / rows;
  sampled_ids_.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    sampled_logits_.assign(logits.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                           logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
    sampled_ids_[r] = sample_row(sampled_logits_, sampling, r);
  }
  return std::span<const int32_t>(sampled_ids_);
}

}  // namespace kiln::runtime
