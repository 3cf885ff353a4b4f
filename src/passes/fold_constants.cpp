// Constant folding: build-time ops whose inputs are all weights (GPT-2's Conv1D transpose,
// Baichuan2's lm_head row normalisation) become new weights with a composed loader; general
// tensor ops whose inputs are all weights (an ONNX graph's shape arithmetic, a transposed
// initializer) are evaluated once here, through the backend's NodeEvaluator, and become weights
// holding their results.
#include <cmath>
#include <cstring>
#include <memory>

#include "ir/ops.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

Expected<std::vector<float>> transposed(const ir::WeightLoader& load, int64_t rows, int64_t cols) {
  // src: [rows, cols] -> dst: [cols, rows]
  KILN_ASSIGN_OR_RETURN(std::vector<float> src, load());
  std::vector<float> dst(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[static_cast<size_t>(c * rows + r)] = src[static_cast<size_t>(r * cols + c)];
  }
  return dst;
}

Expected<std::vector<float>> normalized_rows(const ir::WeightLoader& load, int64_t rows, int64_t cols) {
  // Each row divided by max(||row||_2, 1e-12), as torch.nn.functional.normalize does.
  KILN_ASSIGN_OR_RETURN(std::vector<float> w, load());
  for (int64_t r = 0; r < rows; ++r) {
    float* row = w.data() + r * cols;
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(row[c]) * row[c];
    const double norm = std::max(std::sqrt(ss), 1e-12);
    for (int64_t c = 0; c < cols; ++c) row[c] = static_cast<float>(row[c] / norm);
  }
  return w;
}

// Folds general tensor ops whose inputs are all weights; returns how many nodes it folded.
Expected<size_t> fold_tensor_ops(ir::Graph& graph, NodeEvaluator& evaluator, std::vector<bool>& dead) {
  size_t folded = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const ir::Node node = graph.nodes()[i];
    const ir::OpInfo* info = ir::op_info(node.op);
    if (info == nullptr || info->family != ir::OpFamily::kTensor || !evaluator.can_evaluate(node.op)) continue;
    // Identity of a weight is how an ONNX Constant reaches a graph output; leave those.
    if (node.op == "Identity" || node.op == "Dropout") continue;
    bool constant = !node.inputs.empty();
    for (ir::ValueId in : node.inputs) constant = constant && (in == ir::kNoValue || graph.value(in).is_weight);
    if (!constant) continue;
    bool is_output = false;
    for (ir::ValueId out : node.outputs) {
      for (ir::ValueId g : graph.outputs()) is_output = is_output || g == out;
    }
    if (is_output) continue;
    std::vector<ir::Tensor> held;
    held.reserve(node.inputs.size());
    std::vector<const ir::Tensor*> args;
    for (ir::ValueId in : node.inputs) {
      if (in == ir::kNoValue) {
        args.push_back(nullptr);
        continue;
      }
      KILN_ASSIGN_OR_RETURN(ir::Tensor t, weight_tensor(graph.weight(in)));
      held.push_back(std::move(t));
    }
    size_t k = 0;
    args.clear();
    for (ir::ValueId in : node.inputs) args.push_back(in == ir::kNoValue ? nullptr : &held[k++]);
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Tensor> outs, evaluator.evaluate(node, args));
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const std::string name = graph.value(node.outputs[o]).name + "/folded";
      ir::ValueId w = graph.add_weight(name, ir::weight_entry_from_tensor(outs[o]));
      graph.replace_uses(node.outputs[o], w);
    }
    dead[i] = true;
    ++folded;
  }
  return folded;
}

}  // namespace

Status run_fold_constants(ir::Graph& graph, const PassContext& ctx) {
  std::vector<bool> dead(graph.nodes().size(), false);
  if (ctx.evaluator != nullptr) {
    KILN_ASSIGN_OR_RETURN(size_t folded, fold_tensor_ops(graph, *ctx.evaluator, dead));
    if (folded) ctx.note("folded " + std::to_string(folded) + " constant nodes");
  }
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    if (dead[i]) continue;
    const ir::Node node = graph.nodes()[i];
    const ir::OpInfo* info = ir::op_info(node.op);
    if (info == nullptr || !info->build_time_only) continue;
    if (node.inputs.size() != 1 || !graph.value(node.inputs[0]).is_weight) {
      return invalid_argument("node '" + node.name + "' (" + node.op + ") must read a weight to be folded");
    }
    const ir::WeightEntry src = graph.weight(node.inputs[0]);
    const int64_t rows = src.rows(), cols = src.cols();
    ir::WeightEntry folded;
    folded.shape = graph.value(node.outputs[0]).shape;
    if (node.op == "transpose") {
      folded.load = [load = src.load, rows, cols]() { return transposed(load, rows, cols); };
    } else {
      folded.load = [load = src.load, rows, cols]() { return normalized_rows(load, rows, cols); };
    }
    ir::ValueId w = graph.add_weight(node.name, std::move(folded));
    graph.replace_uses(node.outputs[0], w);
    dead[i] = true;
  }
  erase_nodes(graph, dead);
  graph.prune_weights();
  return Status::ok();
}

}  // namespace kiln::passes
