// The CPU backend's GraphRunner (runtime/backend.h): runs a general (imported ONNX) graph on the
// CPU, the graph's nodes in order, each through its tensor kernel (tensor_kernel.h), with every
// value's tensor released right after its last reader, so a run holds only the live activations. Input shapes and dtypes are checked against
// the graph before anything runs: a missing input, a wrong dtype, a wrong rank, a fixed dimension
// that differs, a named dimension ("batch") bound to two sizes or a shape outside the input's
// optimisation profile (ir/input_profile.h) is a one-line error naming it.
//
// Ownership: the runner borrows the graph (and, through it, the weights' stored bytes: an
// engine's mapping) and must not outlive it; f16 / bf16 / quantised weights are widened to f32
// once, at create(), and owned by the runner. run() may be called any number of times, one at a
// time; the tensors it returns own (or share) their storage and outlive the runner.
//
// With KILN_CPU_PROFILE=1 in the environment, the runner times every node and, when destroyed,
// prints to stderr the time per op (a fused epilogue counts as part of the op's name) over all runs;
// with KILN_CPU_PROFILE=nodes, also the slowest nodes with their weights' shapes and attributes.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/tensor/tensor_kernel.h"
#include "ir/graph.h"
#include "ir/input_profile.h"
#include "ir/tensor_ops.h"
#include "ir/tensor.h"
#include "passes/pass.h"
#include "runtime/backend.h"

namespace kiln::cpu {

class TensorGraphRunner final : public runtime::GraphRunner {
 public:
  // Fails naming the first node that has no CPU kernel or a weight whose bytes do not fit.
  // `profiles` bound the inputs they name (an engine's: ir::input_profiles_from_json).
  static Expected<std::unique_ptr<TensorGraphRunner>> create(const ir::Graph& graph,
                                                             std::vector<ir::InputProfile> profiles = {});

  // Outputs by graph output name, in graph order.
  Expected<std::vector<std::pair<std::string, ir::Tensor>>> run(const std::map<std::string, ir::Tensor>& inputs) override;

 private:
  explicit TensorGraphRunner(const ir::Graph& graph) : graph_(graph) {}
 public:
  ~TensorGraphRunner() override;

 private:
  Status check_inputs(const std::map<std::string, ir::Tensor>& inputs) const;

  const ir::Graph& graph_;
  std::map<ir::ValueId, ir::Tensor> weights_;
  std::vector<size_t> last_use_;  // per value: index of the last node reading it
  std::vector<std::vector<ir::Guard>> guards_;  // per node: the If branches it sits in
  std::vector<ir::InputProfile> profiles_;
  bool profile_ = false, profile_nodes_ = false;
  size_t runs_ = 0;
  std::vector<double> node_seconds_;  // per node, over all runs (profile_ only)
};

// The weight `entry` as a tensor: a view of its stored bytes when they are raw elements, else
// its values widened to f32 (owned).
Expected<ir::Tensor> tensor_from_stored_weight(const std::string& name, const ir::WeightEntry& entry);

// Constant folding's evaluator (passes::NodeEvaluator) backed by the CPU tensor kernels.
class CpuNodeEvaluator : public passes::NodeEvaluator {
 public:
  bool can_evaluate(const std::string& op) const override { return tensor_kernel(op) != nullptr; }
  Expected<std::vector<ir::Tensor>> evaluate(const ir::Node& node, const std::vector<const ir::Tensor*>& inputs) override;
};

}  // namespace kiln::cpu
