#include "backends/cpu/tensor/tensor_graph_runner.h"

#include <malloc.h>

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/cpu/op_profile.h"
#include "ir/epilogue.h"

namespace kiln::cpu {
namespace {

// Every node's output is a fresh, zero-filled allocation. With glibc's defaults, outputs of a
// few MB come from mmap or sit at the top of the heap and are given back to the kernel when
// freed, so the next run faults every page in again (a fifth of a PaddleOCR run). A process that
// runs general graphs keeps up to 256 MiB of freed memory for reuse instead, and maps only
// allocations of 64 MiB and more on their own.
void keep_freed_memory_for_reuse() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

}  // namespace

Expected<ir::Tensor> tensor_from_stored_weight(const std::string& name, const ir::WeightEntry& entry) {
  if (entry.stored.size() != entry.stored_bytes()) {
    return invalid_argument("weight '" + name + "' holds " + std::to_string(entry.stored.size()) + " bytes, not " +
                            std::to_string(entry.stored_bytes()));
  }
  if (entry.dtype != ir::DType::kF32 || entry.format == ir::WeightFormat::kF32) {
    return ir::Tensor::view(entry.dtype, entry.shape, entry.stored);
  }
  ir::Tensor t(ir::DType::kF32, entry.shape);
  const int64_t cols = entry.cols();
  const size_t row_bytes = ir::weight_format_row_bytes(entry.format, cols);
  if (ir::weight_format_is_panel(entry.format)) {
    return invalid_argument("weight '" + name + "' is stored in a panel layout, which general graphs do not read");
  }
  for (int64_t r = 0; r < entry.rows(); ++r) {
    ir::weight_dequantize_row(entry.format, entry.stored.data() + static_cast<size_t>(r) * row_bytes, cols,
                              t.mutable_data<float>() + r * cols);
  }
  return t;
}

Expected<std::unique_ptr<TensorGraphRunner>> TensorGraphRunner::create(const ir::Graph& graph,
                                                                      std::vector<ir::InputProfile> profiles) {
  KILN_RETURN_IF_ERROR(ir::input_profiles_validate(graph, profiles));
  keep_freed_memory_for_reuse();
  std::unique_ptr<TensorGraphRunner> runner(new TensorGraphRunner(graph));
  runner->profiles_ = std::move(profiles);
  const ProfileLevel profile = profile_level_from_env();
  runner->profile_ = profile != ProfileLevel::kOff;
  runner->profile_nodes_ = profile == ProfileLevel::kNodes;
  runner->node_seconds_.assign(graph.nodes().size(), 0.0);
  for (const auto& node : graph.nodes()) {
    if (tensor_kernel(node.op) == nullptr) {
      return unimplemented("node '" + node.name + "' (" + node.op + "): no CPU kernel for general graphs");
    }
    for (ir::ValueId in : node.inputs) {
      if (in == ir::kNoValue || !graph.value(in).is_weight || runner->weights_.count(in)) continue;
      const std::string& name = graph.value(in).name;
      KILN_ASSIGN_OR_RETURN(runner->weights_[in], tensor_from_stored_weight(name, graph.weights().at(name)));
    }
  }
  runner->last_use_.assign(graph.values().size(), 0);
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    for (ir::ValueId in : graph.nodes()[i].inputs) {
      if (in != ir::kNoValue) runner->last_use_[static_cast<size_t>(in)] = i;
    }
  }
  for (ir::ValueId out : graph.outputs()) runner->last_use_[static_cast<size_t>(out)] = graph.nodes().size();
  for (const ir::Node& n : graph.nodes()) runner->guards_.push_back(ir::node_guards(n));
  return runner;
}

Status TensorGraphRunner::check_inputs(const std::map<std::string, ir::Tensor>& inputs) const {
  std::map<int64_t, int64_t> bound;  // named symbol -> size
  for (ir::ValueId id : graph_.inputs()) {
    const ir::Value& v = graph_.value(id);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) return invalid_argument("missing input '" + v.name + "'");
    const ir::Tensor& t = it->second;
    if (t.dtype() != v.dtype) {
      return invalid_argument("input '" + v.name + "' is " + std::string(ir::dtype_name(t.dtype())) + ", the model takes " +
                              std::string(ir::dtype_name(v.dtype)));
    }
    if (!v.shape_known) continue;
    if (t.rank() != static_cast<int64_t>(v.shape.size())) {
      return invalid_argument("input '" + v.name + "' has shape " + ir::shape_to_string(t.shape()) + ", the model takes " +
                              graph_.shape_str(v));
    }
    for (size_t d = 0; d < v.shape.size(); ++d) {
      const int64_t want = v.shape[d], got = t.shape()[d];
      if (want >= 0 && want != got) {
        return invalid_argument("input '" + v.name + "' has shape " + ir::shape_to_string(t.shape()) +
                                ", the model takes " + graph_.shape_str(v));
      }
      if (want <= ir::kFirstNamedDim) {
        auto [b, fresh] = bound.emplace(want, got);
        if (!fresh && b->second != got) {
          return invalid_argument("input '" + v.name + "': dimension '" + graph_.dim_str(want) + "' is " +
                                  std::to_string(got) + " here but " + std::to_string(b->second) + " in another input");
        }
      }
    }
  }
  for (const ir::InputProfile& p : profiles_) {
    KILN_RETURN_IF_ERROR(ir::input_profile_check(p, inputs.at(p.input).shape()));
  }
  for (const auto& [name, t] : inputs) {
    bool known = false;
    for (ir::ValueId id : graph_.inputs()) known = known || graph_.value(id).name == name;
    if (!known) return invalid_argument("the model has no input named '" + name + "'");
  }
  return Status::ok();
}

Expected<std::vector<std::pair<std::string, ir::Tensor>>> TensorGraphRunner::run(
    const std::map<std::string, ir::Tensor>& inputs) {
  KILN_RETURN_IF_ERROR(check_inputs(inputs));
  std::vector<ir::Tensor> live(graph_.values().size());
  for (ir::ValueId id : graph_.inputs()) live[static_cast<size_t>(id)] = inputs.at(graph_.value(id).name);
  for (const auto& [id, t] : weights_) live[static_cast<size_t>(id)] = t;
  std::vector<ir::Tensor> outs;
  TensorInputs args;
  const auto value = [&live](ir::ValueId id) -> const ir::Tensor* { return &live[static_cast<size_t>(id)]; };
  for (size_t i = 0; i < graph_.nodes().size(); ++i) {
    const ir::Node& node = graph_.nodes()[i];
    // A node inside an If branch that is not taken makes nothing (ir/tensor_ops.h).
    if (guards_[i].empty() || ir::guards_hold(guards_[i], value)) {
      args.clear();
      for (ir::ValueId in : node.inputs) args.push_back(in == ir::kNoValue ? nullptr : &live[static_cast<size_t>(in)]);
      const auto start = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
      KILN_RETURN_IF_ERROR(tensor_run_node(node, args, outs));
      if (profile_) node_seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (size_t k = 0; k < node.outputs.size(); ++k) live[static_cast<size_t>(node.outputs[k])] = std::move(outs[k]);
    }
    for (ir::ValueId in : node.inputs) {
      if (in != ir::kNoValue && last_use_[static_cast<size_t>(in)] == i && !graph_.value(in).is_weight) {
        live[static_cast<size_t>(in)] = ir::Tensor();
      }
    }
  }
  ++runs_;
  std::vector<std::pair<std::string, ir::Tensor>> result;
  for (ir::ValueId id : graph_.outputs()) result.emplace_back(graph_.value(id).name, live[static_cast<size_t>(id)]);
  return result;
}

TensorGraphRunner::~TensorGraphRunner() {
  if (!profile_ || runs_ == 0) return;
  OpProfile by_op;
  by_op.runs = runs_;
  for (size_t i = 0; i < graph_.nodes().size(); ++i) {
    const ir::Node& n = graph_.nodes()[i];
    std::string key = n.op;
    const ir::Epilogue e = ir::node_epilogue(n);
    if (e.activation != ir::Activation::kNone) key += "+" + std::string(ir::activation_name(e.activation));
    OpProfile::Entry& entry = by_op.by_kind[key];
    entry.seconds += node_seconds_[i];
    ++entry.nodes;
  }
  by_op.print("run");
  if (!profile_nodes_) return;
  std::vector<std::pair<double, size_t>> nodes;
  for (size_t i = 0; i < node_seconds_.size(); ++i) nodes.emplace_back(node_seconds_[i], i);
  std::sort(nodes.rbegin(), nodes.rend());
  std::fprintf(stderr, "slowest nodes:\n");
  for (size_t k = 0; k < std::min<size_t>(nodes.size(), 25); ++k) {
    const ir::Node& n = graph_.nodes()[nodes[k].second];
    std::string weights;
    for (ir::ValueId in : n.inputs) {
      if (in != ir::kNoValue && graph_.value(in).is_weight) weights += " " + ir::shape_to_string(graph_.weight(in).shape);
    }
    std::fprintf(stderr, "  %9.3f ms  %-14s %s%s  %s\n", nodes[k].first * 1e3 / static_cast<double>(runs_), n.op.c_str(),
                 n.name.c_str(), weights.c_str(), ir::print_attrs(n).c_str());
  }
}

Expected<std::vector<ir::Tensor>> CpuNodeEvaluator::evaluate(const ir::Node& node,
                                                              const std::vector<const ir::Tensor*>& inputs) {
  std::vector<ir::Tensor> outs;
  KILN_RETURN_IF_ERROR(tensor_run_node(node, inputs, outs));
  return outs;
}

}  // namespace kiln::cpu
