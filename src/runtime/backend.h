// The backend interface: what a device offers the two kinds of engines. For an LLM engine it is
// what the executor needs: a backend checks that it can run the engine (its target and every
// op), then in prepare() binds each node to a kernel, makes
// the weights resident (the CPU backend reads them in place from the mapped engine; a GPU
// backend uploads them once) and allocates its activation memory for steps of up to max_tokens
// tokens. Each step, run_step() runs the whole graph over a ragged batch the executor has
// validated and returns the logits in host memory, so that a backend can run a step as one
// unit (a GPU backend captures and replays it as a graph); run_step_sampled() runs it and
// chooses each row's next token (device_sampling.h), so that a backend that samples on its
// device returns token ids only. KV-cache storage is memory the backend allocates (allocate()),
// held by the runtime's KvCache. For a general engine (an imported graph of tensor ops, such as an
// ONNX model), create_graph_runner() makes a GraphRunner: one execution context that takes named
// tensors and returns the graph's outputs; a model repository runs one per instance.
// backends/registry opens the backend an engine's target names.
//
// Ownership: the backend owns its kernels, weights copies and activation memory; the executor
// owns the step's host-side arrays (StepView pointers) for the length of run_step(); the
// caller owns the KvCache and each GraphRunner, which must not outlive the backend or the model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "runtime/device_buffer.h"
#include "runtime/device_sampling.h"
#include "runtime/kv_cache.h"

namespace kiln::runtime {

class LoadedModel;

// The ragged batch of one step. Sequence s owns token rows [query_start[s], query_start[s+1]);
// its first new token sits at position context_len[s]. Given to run_step() with host pointers;
// a backend passes its kernels a copy whose pointers are on its device.
struct StepView {
  int64_t num_tokens = 0;
  int64_t num_rows = 0;  // rows of logits requested
  int64_t num_seqs = 0;
  const int32_t* ids = nullptr;          // [num_tokens] token ids
  const int32_t* positions = nullptr;    // [num_tokens]
  const int32_t* logit_rows = nullptr;   // [num_rows] token rows whose logits are returned
  const int32_t* query_start = nullptr;  // [num_seqs + 1]
  const int32_t* context_len = nullptr;  // [num_seqs]
  const int32_t* const* block_tables = nullptr;  // [num_seqs], each covering its sequence's positions
  KvCache* kv_cache = nullptr;
};

// One execution context over a general graph. run() checks the inputs against the graph and its
// optimisation profiles (a missing input, a wrong dtype or rank, a shape outside the profile is
// a one-line error) and returns the outputs by graph output name, in graph order; the tensors
// own (or share) their storage and outlive the runner. One run() at a time per runner.
class GraphRunner {
 public:
  virtual ~GraphRunner() = default;
  virtual Expected<std::vector<std::pair<std::string, ir::Tensor>>> run(
      const std::map<std::string, ir::Tensor>& inputs) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string target() const = 0;
  // Per-thread settings that a thread needs before it runs this backend's work, called on that
  // thread (the CPU backend: its OpenMP team size). Nothing by default.
  virtual void prepare_thread() const {}
  // Fails with a message naming what to rebuild when an engine built for `engine_target` cannot run here.
  virtual Status check_target(const std::string& engine_target) const = 0;
  // Binds every node of the model's graph to a kernel (failing on the first node it cannot run),
  // makes the weights resident and allocates activation memory for steps of up to `max_tokens`
  // tokens. The model must outlive the backend's use of it.
  virtual Status prepare(const LoadedModel& model, int64_t max_tokens) = 0;
  // Memory on this backend's device, for KV-cache storage.
  virtual Expected<std::unique_ptr<DeviceBuffer>> allocate(size_t bytes) = 0;
  // Whether run_step reads and writes a KV cache of this element type (fp32 unless overridden).
  virtual bool supports_kv_cache_dtype(KvCacheDtype dtype) const { return dtype == KvCacheDtype::kF32; }
  // Runs the prepared graph over one validated step; returns logits [num_rows, vocab] in host
  // memory, valid until the next call.
  virtual Expected<std::span<const float>> run_step(const StepView& step) = 0;
  // Whether run_step_sampled() samples on the device (else it samples the host's copy of the
  // logits, which is what callers with a Sampler of their own do better).
  virtual bool samples_on_device() const { return false; }
  // Runs the step and chooses one token per logits row as device_sampling.h says, with the
  // validated `sampling` (one row per logits row); returns the ids and the logits of the batch's
  // host rows, valid until the next call. The default runs run_step() and sample_row() on the
  // host.
  virtual Expected<SampledStep> run_step_sampled(const StepView& step, const SamplingBatch& sampling);

  // A runner of a general engine's graph, its inputs bounded by the engine's optimisation
  // profiles. Fails naming the first node this backend cannot run; a backend that runs only LLM
  // engines refuses, naming its target.
  virtual Expected<std::unique_ptr<GraphRunner>> create_graph_runner(const LoadedModel& model);

 private:
  std::vector<float> sampled_row_, sampled_logits_;  // the default run_step_sampled's scratch
  std::vector<int32_t> sampled_ids_;
};

}  // namespace kiln::runtime
