// The executor runs one forward step of a loaded engine over a ragged batch: several sequences,
// each with its own number of new tokens (prefill chunks and single decode tokens mixed) and its
// own block table into the paged KV cache. It validates every step before touching the cache,
// lays the step out as host arrays (StepView) and has the backend run it; the backend owns the
// activation memory (sized once from the engine's memory plan and max_tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/backend.h"
#include "runtime/kv_cache.h"
#include "runtime/loaded_model.h"

namespace kiln::runtime {

struct SequenceStep {
  std::span<const int32_t> tokens;       // the new tokens of this step
  int64_t context_len = 0;               // tokens of this sequence already in the cache
  std::span<const int32_t> block_table;  // covers positions [0, context_len + tokens.size())
  bool all_logits = false;               // logits for every new token, else only for the last
};

class Executor {
 public:
  // The model and backend must outlive the executor; the backend is prepared for the model.
  static Expected<std::unique_ptr<Executor>> create(const LoadedModel& model, Backend& backend);

  // Runs the step and returns logits [rows, vocab]: for each sequence in order, one row per new
  // token if all_logits, else one row for its last token. The span is valid until the next step.
  Expected<std::span<const float>> step(std::span<const SequenceStep> seqs, KvCache& cache);
  // Runs the step and chooses one token per logits row (device_sampling.h) with `sampling`, one
  // row for each; returns the ids (-1: a row with no finite logit) and the logits of the batch's
  // host rows, valid until the next step.
  Expected<SampledStep> step_sampled(std::span<const SequenceStep> seqs, KvCache& cache, const SamplingBatch& sampling);
  // Whether step_sampled() samples on the backend's device, so that only ids leave it.
  bool samples_on_device() const { return backend_.samples_on_device(); }

  // A KV cache spec for this model holding `num_blocks` blocks.
  KvCacheSpec kv_cache_spec(int64_t num_blocks, int64_t block_size = 16, KvCacheDtype dtype = KvCacheDtype::kF32) const;
  // A KV cache of `num_blocks` blocks in the backend's memory; fails when the backend does not
  // run caches of `dtype`.
  Expected<std::unique_ptr<KvCache>> create_kv_cache(int64_t num_blocks, int64_t block_size = 16,
                                                     KvCacheDtype dtype = KvCacheDtype::kF32) const;
  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_seq_len() const { return model_.facts().max_seq_len; }
  int64_t vocab_size() const { return model_.facts().vocab_size; }

 private:
  Executor(const LoadedModel& model, Backend& backend);
  // Validates the step and lays it out in the members below.
  Expected<StepView> prepare_step(std::span<const SequenceStep> seqs, KvCache& cache);

  const LoadedModel& model_;
  Backend& backend_;
  int64_t max_tokens_ = 0;
  std::vector<int32_t> positions_, query_start_, context_len_, logit_rows_, ids_;
  std::vector<const int32_t*> tables_;
};

}  // namespace kiln::runtime
