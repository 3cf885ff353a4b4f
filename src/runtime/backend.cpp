#include "runtime/backend.h"

namespace kiln::runtime {

Expected<SampledStep> Backend::run_step_sampled(const StepView& step, const SamplingBatch& sampling) {
  KILN_ASSIGN_OR_RETURN(std::span<const float> logits, run_step(step));
  const auto rows = static_cast<size_t>(step.num_rows);
  const size_t vocab = rows == 0 ? 0 : logits.size() / rows;
  const auto row = [&](size_t r) { return logits.subspan(r * vocab, vocab); };
  sampled_logits_.clear();
  for (int32_t r : sampling.host_rows) {
    const std::span<const float> kept = row(static_cast<size_t>(r));
    sampled_logits_.insert(sampled_logits_.end(), kept.begin(), kept.end());
  }
  sampled_ids_.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    sampled_row_.assign(row(r).begin(), row(r).end());
    sampled_ids_[r] = sample_row(sampled_row_, sampling, r);
  }
  return SampledStep{sampled_ids_, sampled_logits_};
}

Expected<std::unique_ptr<GraphRunner>> Backend::create_graph_runner(const LoadedModel& /*model*/) {
  return unimplemented("the " + target() + " backend runs LLM engines only; build this model for the CPU " +
                       "(kiln build MODEL --target cpu)");
}

}  // namespace kiln::runtime
