#include "runtime/executor.h"

namespace kiln::runtime {

Executor::Executor(const LoadedModel& model, Backend& backend) : model_(model), backend_(backend) {}

Expected<std::unique_ptr<Executor>> Executor::create(const LoadedModel& model, Backend& backend) {
  KILN_RETURN_IF_ERROR(backend.check_target(model.file().header().target));
  std::unique_ptr<Executor> ex(new Executor(model, backend));
  ex->max_tokens_ = model.facts().max_batch_tokens;
  KILN_RETURN_IF_ERROR(backend.prepare(model, ex->max_tokens_));
  return ex;
}

Expected<std::unique_ptr<KvCache>> Executor::create_kv_cache(int64_t num_blocks, int64_t block_size,
                                                             KvCacheDtype dtype) const {
  if (num_blocks <= 0 || block_size <= 0) return invalid_argument("a KV cache needs at least one block of one position");
  if (!backend_.supports_kv_cache_dtype(dtype)) {
    return unimplemented("the " + backend_.target() + " backend has no " + std::string(kv_cache_dtype_name(dtype)) +
                         " KV cache (use fp32)");
  }
  const KvCacheSpec spec = kv_cache_spec(num_blocks, block_size, dtype);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> storage, backend_.allocate(spec.bytes()));
  return std::make_unique<KvCache>(spec, std::move(storage));
}

KvCacheSpec Executor::kv_cache_spec(int64_t num_blocks, int64_t block_size, KvCacheDtype dtype) const {
  KvCacheSpec spec;
  spec.dtype = dtype;
  spec.num_layers = model_.facts().num_layers;
  spec.num_kv_heads = model_.facts().num_kv_heads;
  spec.head_dim = model_.facts().head_dim;
  spec.block_size = block_size;
  spec.num_blocks = num_blocks;
  return spec;
}

Expected<StepView> Executor::prepare_step(std::span<const SequenceStep> seqs, KvCache& cache) {
  const ModelFacts& facts = model_.facts();
  if (seqs.empty()) return invalid_argument("a step needs at least one sequence");
  const KvCacheSpec& spec = cache.spec();
  if (spec.num_layers != facts.num_layers || spec.num_kv_heads != facts.num_kv_heads ||
      spec.head_dim != facts.head_dim) {
    return invalid_argument("the KV cache was made for another model");
  }
  if (!backend_.supports_kv_cache_dtype(spec.dtype)) {
    return invalid_argument("the " + backend_.target() + " backend has no " +
                            std::string(kv_cache_dtype_name(spec.dtype)) + " KV cache");
  }
  positions_.clear();
  ids_.clear();
  logit_rows_.clear();
  query_start_.assign(1, 0);
  context_len_.clear();
  tables_.clear();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceStep& seq = seqs[s];
    const std::string which = "sequence " + std::to_string(s) + ": ";
    const auto n = static_cast<int64_t>(seq.tokens.size());
    if (n == 0) return invalid_argument(which + "no new tokens");
    if (seq.context_len < 0) return invalid_argument(which + "negative context length");
    const int64_t end = seq.context_len + n;
    if (end > facts.max_seq_len) {
      return invalid_argument(which + std::to_string(end) + " tokens exceed the engine's max sequence length " +
                              std::to_string(facts.max_seq_len) + " (rebuild with a larger --max-seq-len)");
    }
    if (static_cast<int64_t>(seq.block_table.size()) * spec.block_size < end) {
      return invalid_argument(which + "block table covers fewer than " + std::to_string(end) + " positions");
    }
    for (int32_t b : seq.block_table) {
      if (b < 0 || b >= spec.num_blocks) return invalid_argument(which + "block id " + std::to_string(b) + " out of range");
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = seq.tokens[static_cast<size_t>(i)];
      if (id < 0 || id >= facts.vocab_size) {
        return invalid_argument(which + "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(facts.vocab_size) + ")");
      }
      ids_.push_back(id);
      positions_.push_back(static_cast<int32_t>(seq.context_len + i));
      if (seq.all_logits || i == n - 1) logit_rows_.push_back(static_cast<int32_t>(ids_.size() - 1));
    }
    query_start_.push_back(static_cast<int32_t>(ids_.size()));
    context_len_.push_back(static_cast<int32_t>(seq.context_len));
    tables_.push_back(seq.block_table.data());
  }
  const auto num_tokens = static_cast<int64_t>(ids_.size());
  if (num_tokens > max_tokens_) {
    return invalid_argument("a step of " + std::to_string(num_tokens) + " tokens exceeds the engine's " +
                            std::to_string(max_tokens_) + " (split it, or rebuild with a larger --max-batch-tokens)");
  }

  StepView view;
  view.num_tokens = num_tokens;
  view.num_rows = static_cast<int64_t>(logit_rows_.size());
  view.num_seqs = static_cast<int64_t>(seqs.size());
  view.ids = ids_.data();
  view.positions = positions_.data();
  view.logit_rows = logit_rows_.data();
  view.query_start = query_start_.data();
  view.context_len = context_len_.data();
  view.block_tables = tables_.data();
  view.kv_cache = &cache;
  return view;
}

Expected<std::span<const float>> Executor::step(std::span<const SequenceStep> seqs, KvCache& cache) {
  KILN_ASSIGN_OR_RETURN(const StepView view, prepare_step(seqs, cache));
  KILN_ASSIGN_OR_RETURN(std::span<const float> logits, backend_.run_step(view));
  const auto expected = static_cast<size_t>(view.num_rows * model_.facts().vocab_size);
  if (logits.size() != expected) {
    return internal_error("the backend returned " + std::to_string(logits.size()) + " logits for " +
                          std::to_string(expected));
  }
  return logits;
}

Expected<SampledStep> Executor::step_sampled(std::span<const SequenceStep> seqs, KvCache& cache,
                                             const SamplingBatch& sampling) {
  KILN_ASSIGN_OR_RETURN(const StepView view, prepare_step(seqs, cache));
  KILN_RETURN_IF_ERROR(validate(sampling, view.num_rows));
  KILN_ASSIGN_OR_RETURN(SampledStep out, backend_.run_step_sampled(view, sampling));
  if (static_cast<int64_t>(out.ids.size()) != view.num_rows ||
      out.logits.size() != sampling.host_rows.size() * static_cast<size_t>(model_.facts().vocab_size)) {
    return internal_error("the backend returned " + std::to_string(out.ids.size()) + " tokens and " +
                          std::to_string(out.logits.size()) + " logits for " + std::to_string(view.num_rows) +
                          " rows, " + std::to_string(sampling.host_rows.size()) + " of them on the host");
  }
  return out;
}

}  // namespace kiln::runtime
