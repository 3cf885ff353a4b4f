// The build's compiler passes. Each pass is one file with `Status run_<name>(Graph&, const PassContext&)`;
// the pipeline (pipeline.h) runs them as a named list. Passes mutate the graph in place and never
// touch weight contents directly: they compose WeightLoaders, which the engine writer runs once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"
#include "passes/int8_calibrators.h"

namespace kiln::passes {

// What the user asked `kiln build` for.
struct BuildOptions {
  ir::WeightFormat matmul_format = ir::WeightFormat::kF32;  // linear layers and embeddings
  int64_t max_seq_len = 2048;
  int64_t max_batch_tokens = 512;
  bool autotune = true;
  // Store f32 weights that have been through matmul_format's rounding and back ("fake
  // quantisation"): the engine computes exactly what a quantised one should, in f32, which is
  // how tests separate quantisation error from kernel error.
  bool simulate_quantization = false;
};

// Kernel timing on the build machine, implemented by a backend (backends/cpu). Passes see only this.
class KernelTuner {
 public:
  virtual ~KernelTuner() = default;
  virtual std::string target() const = 0;  // e.g. "cpu-avx2"
  // Kernel names that can compute a matmul with weights in `format`, best guess first.
  virtual std::vector<std::string> matmul_candidates(ir::WeightFormat format) const = 0;
  // Those suited to products of `m` activation rows (a target whose decode and prefill kernels
  // differ narrows the list); by default all of them.
  virtual std::vector<std::string> matmul_candidates_for(ir::WeightFormat format, int64_t /*m*/) const {
    return matmul_candidates(format);
  }
  // Kernels of one results class give each output row the same bits, whatever the number of
  // rows in the call and whichever of them runs it. A matmul's decode and prefill kernels are
  // chosen of one class, so that a sequence's tokens do not depend on how many others share its
  // step. By default every kernel is of one class (a target that promises nothing).
  virtual std::string matmul_results_class(const std::string& /*kernel*/) const { return ""; }
  // The device kernels are timed on, for the engine's metadata ("NVIDIA H200"); empty for none.
  virtual std::string device_name() const { return ""; }
  // How many interleaved rounds select_kernels times the candidates of one shape in, keeping
  // each one's fastest (a target whose timings a busy machine disturbs asks for several).
  virtual int timing_rounds() const { return 1; }
  // Seconds of one [m, k] x [n, k]^T product with `kernel` on random data.
  virtual double time_matmul(const std::string& kernel, ir::WeightFormat format, int64_t m, int64_t n,
                             int64_t k) = 0;
};

// Evaluation of one general tensor op on constant inputs, implemented by a backend
// (backends/cpu), for constant folding. Passes see only this.
class NodeEvaluator {
 public:
  virtual ~NodeEvaluator() = default;
  virtual bool can_evaluate(const std::string& op) const = 0;
  virtual Expected<std::vector<ir::Tensor>> evaluate(const ir::Node& node,
                                                     const std::vector<const ir::Tensor*>& inputs) = 0;
};

// Calibrated int8 for general graphs (`kiln build model.onnx --int8 --calib DIR`): the sample
// inputs the graph runs on to measure its activations, each a map from graph input name to
// tensor ("" stands for the only input of a one-input graph).
struct Int8Calibration {
  Calibrator calibrator = Calibrator::kEntropy;
  double percentile = 99.99;
  std::vector<std::map<std::string, ir::Tensor>> samples;
};

struct PassContext {
  BuildOptions options;
  const Int8Calibration* int8 = nullptr;         // null: no int8 (quantize_int8 does nothing)
  KernelTuner* tuner = nullptr;                  // may be null: then the first candidate is taken
  NodeEvaluator* evaluator = nullptr;            // may be null: then general ops are not folded
  std::function<void(const std::string&)> log;  // optional notes for the user (fallbacks, choices)
  void note(const std::string& message) const {
    if (log) log(message);
  }
};

Status run_fold_constants(ir::Graph& graph, const PassContext& ctx);
Status run_eliminate_dead_nodes(ir::Graph& graph, const PassContext& ctx);
Status run_eliminate_noops(ir::Graph& graph, const PassContext& ctx);
Status run_fuse_conv_batchnorm(ir::Graph& graph, const PassContext& ctx);
Status run_fuse_subgraphs(ir::Graph& graph, const PassContext& ctx);
Status run_fuse_epilogues(ir::Graph& graph, const PassContext& ctx);
Status run_fuse_attention(ir::Graph& graph, const PassContext& ctx);
Status run_transpose_matmul_weights(ir::Graph& graph, const PassContext& ctx);
Status run_fuse_sibling_matmuls(ir::Graph& graph, const PassContext& ctx);
Status run_fuse_silu_mul(ir::Graph& graph, const PassContext& ctx);
Status run_quantize_int8(ir::Graph& graph, const PassContext& ctx);
Status run_pack_matmul_weights(ir::Graph& graph, const PassContext& ctx);
Status run_assign_precision(ir::Graph& graph, const PassContext& ctx);
Status run_select_kernels(ir::Graph& graph, const PassContext& ctx);
Status run_plan_memory(ir::Graph& graph, const PassContext& ctx);

// Removes nodes in `dead` (indices) from the graph, keeping order.
void erase_nodes(ir::Graph& graph, const std::vector<bool>& dead);
// A weight's contents as a tensor (build time: runs its loader).
Expected<ir::Tensor> weight_tensor(const ir::WeightEntry& w);
// Whether `id` is read by exactly one node and is not a graph output (a fusion may then absorb it).
bool single_reader(const ir::Graph& graph, ir::ValueId id);
// Whether `id` is one of the graph's outputs (which a fusion must keep, whatever reads it).
bool is_graph_output(const ir::Graph& graph, ir::ValueId id);

}  // namespace kiln::passes
