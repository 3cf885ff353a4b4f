// Calibrated int8 for general graphs (`kiln build model.onnx --int8 --calib DIR`), after the
// fusions (so that the products it quantises are the ones that will run) and before precision
// assignment:
//   1. The products with constant f32 weights become candidates: Conv (all but depthwise ones,
//      whose direct f32 kernel is cheaper than an integer product of one row), and MatMul with
//      a transposed weight (passes/transpose_matmul_weights.cpp).
//   2. The graph runs on every calibration sample through the backend's evaluator, twice: once
//      for the range of each candidate's input, once for its histogram (int8_calibrators.h).
//   3. Each candidate's input gets a scale from the calibrator: a tensor that was never negative
//      uses all 256 byte codes (zero point 0), any other 255 of them around zero point 128.
//   4. Its weight becomes int8 codes with one scale per output channel (max |w| / 127), and the
//      node kiln.QConv or kiln.QMatMul (ir/tensor_ops.h), with the input's scale and zero point
//      as attributes; bias and fused epilogue stay as they were, applied in f32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "ir/ops.h"
#include "ir/tensor_ops.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr int64_t kMaxK = 60000;  // 255 * 127 * K must fit the kernels' int32 sums

struct Site {
  size_t node;
  ir::ValueId x;
  int64_t rows = 0, cols = 0;  // the weight as [output channels, K]
};

std::optional<Site> candidate(const ir::Graph& g, size_t i) {
  const ir::Node& n = g.nodes()[i];
  if ((n.op != "Conv" && n.op != "MatMul") || n.inputs.size() < 2 || n.outputs.size() != 1) return std::nullopt;
  const ir::ValueId x = n.inputs[0], w = n.inputs[1];
  if (x == ir::kNoValue || w == ir::kNoValue || g.value(x).is_weight || !g.value(w).is_weight) return std::nullopt;
  if (g.value(x).dtype != ir::DType::kF32) return std::nullopt;
  const ir::WeightEntry& we = g.weight(w);
  if (we.dtype != ir::DType::kF32 || !we.load) return std::nullopt;
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) {
    const ir::ValueId b = n.inputs[2];
    if (!g.value(b).is_weight || g.weight(b).dtype != ir::DType::kF32) return std::nullopt;
  }
  Site s{i, x};
  if (n.op == "Conv") {
    if (we.shape.size() < 3) return std::nullopt;
    const bool depthwise = we.shape[1] == 1 && n.attr_int("group", 1) > 1;
    if (depthwise) return std::nullopt;
    s.rows = we.shape[0];
    s.cols = ir::shape_numel(we.shape) / std::max<int64_t>(s.rows, 1);
  } else {
    if (n.attr_int("kiln.b_transposed", 0) == 0 || we.shape.size() != 2) return std::nullopt;
    s.rows = we.shape[0];
    s.cols = we.shape[1];
  }
  if (s.rows <= 0 || s.cols <= 0 || s.cols > kMaxK) return std::nullopt;
  return s;
}

// The sample's tensor for graph input `name`: by name, by the name with path separators as '_'
// (how file names carry it), or "" for the only input.
const ir::Tensor* sample_input(const std::map<std::string, ir::Tensor>& sample, const std::string& name, bool only) {
  auto it = sample.find(name);
  if (it != sample.end()) return &it->second;
  std::string file = name;
  std::replace(file.begin(), file.end(), '/', '_');
  std::replace(file.begin(), file.end(), '\\', '_');
  it = sample.find(file);
  if (it != sample.end()) return &it->second;
  it = sample.find("");
  return only && it != sample.end() ? &it->second : nullptr;
}

// Runs the graph on every sample, calling seen(value, tensor) for each value in `watch`.
class SampleRunner {
 public:
  SampleRunner(const ir::Graph& g, NodeEvaluator& ev) : g_(g), ev_(ev), last_use_(g.values().size(), 0) {
    for (const ir::Node& n : g.nodes()) guards_.push_back(ir::node_guards(n));
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      for (ir::ValueId in : g.nodes()[i].inputs) {
        if (in != ir::kNoValue) last_use_[static_cast<size_t>(in)] = i;
      }
    }
  }

  Status run(size_t index, const std::map<std::string, ir::Tensor>& sample, const std::set<ir::ValueId>& watch,
             const std::function<void(ir::ValueId, const ir::Tensor&)>& seen) {
    const std::string where = "calibration sample " + std::to_string(index + 1);
    std::vector<std::optional<ir::Tensor>> vals(g_.values().size());
    std::string names;
    for (ir::ValueId id : g_.inputs()) names += (names.empty() ? "" : ", ") + g_.value(id).name;
    for (ir::ValueId id : g_.inputs()) {
      const ir::Value& v = g_.value(id);
      const ir::Tensor* t = sample_input(sample, v.name, g_.inputs().size() == 1);
      if (t == nullptr) return invalid_argument(where + " has no input '" + v.name + "' (the model's inputs: " + names + ")");
      if (t->dtype() != v.dtype) {
        return invalid_argument(where + ": input '" + v.name + "' is " + std::string(ir::dtype_name(t->dtype())) +
                                ", the model takes " + std::string(ir::dtype_name(v.dtype)));
      }
      vals[static_cast<size_t>(id)] = *t;
      if (watch.count(id) != 0) seen(id, *t);
    }
    const auto value = [&](ir::ValueId id) -> const ir::Tensor* {
      return vals[static_cast<size_t>(id)] ? &*vals[static_cast<size_t>(id)] : nullptr;
    };
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
      const ir::Node& n = g_.nodes()[i];
      if (!guards_[i].empty() && !ir::guards_hold(guards_[i], value)) continue;  // a branch not taken
      std::vector<const ir::Tensor*> args;
      for (ir::ValueId in : n.inputs) {
        if (in == ir::kNoValue) {
          args.push_back(nullptr);
        } else if (g_.value(in).is_weight) {
          KILN_ASSIGN_OR_RETURN(const ir::Tensor* w, weight(in));
          args.push_back(w);
        } else if (vals[static_cast<size_t>(in)]) {
          args.push_back(&*vals[static_cast<size_t>(in)]);
        } else if (n.op == "kiln.Select") {
          args.push_back(nullptr);  // the branch not taken
        } else {
          return internal_error(where + ": node '" + n.name + "' reads '" + g_.value(in).name + "' before it is made");
        }
      }
      auto outs = ev_.evaluate(n, args);
      if (!outs) return invalid_argument(where + ": " + outs.status().message());
      for (size_t o = 0; o < n.outputs.size() && o < outs->size(); ++o) {
        const ir::ValueId id = n.outputs[o];
        if (watch.count(id) != 0) seen(id, (*outs)[o]);
        vals[static_cast<size_t>(id)] = std::move((*outs)[o]);
      }
      for (ir::ValueId in : n.inputs) {
        if (in != ir::kNoValue && last_use_[static_cast<size_t>(in)] == i) vals[static_cast<size_t>(in)].reset();
      }
    }
    return Status::ok();
  }

 private:
  Expected<const ir::Tensor*> weight(ir::ValueId id) {
    auto it = weights_.find(id);
    if (it == weights_.end()) {
      KILN_ASSIGN_OR_RETURN(ir::Tensor t, weight_tensor(g_.weight(id)));
      it = weights_.emplace(id, std::move(t)).first;
    }
    return &it->second;
  }

  const ir::Graph& g_;
  NodeEvaluator& ev_;
  std::vector<size_t> last_use_;
  std::vector<std::vector<ir::Guard>> guards_;
  std::map<ir::ValueId, ir::Tensor> weights_;
};

struct QuantizedRows {
  std::vector<std::byte> codes;
  std::vector<float> scales;
};

// Symmetric int8 per row: scale = max |row| / 127 (1 for an all-zero row), code = round(w / scale).
Expected<QuantizedRows> quantize_rows(const ir::WeightLoader& load, int64_t rows, int64_t cols) {
  KILN_ASSIGN_OR_RETURN(std::vector<float> w, load());
  if (static_cast<int64_t>(w.size()) != rows * cols) return internal_error("weight loaded with the wrong size");
  QuantizedRows q;
  q.codes.resize(w.size());
  q.scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w.data() + r * cols;
    float hi = 0.0f;
    for (int64_t c = 0; c < cols; ++c) hi = std::max(hi, std::fabs(row[c]));
    const float scale = hi > 0.0f ? hi / 127.0f : 1.0f;
    q.scales[static_cast<size_t>(r)] = scale;
    for (int64_t c = 0; c < cols; ++c) {
      const float code = std::clamp(std::nearbyint(row[c] / scale), -127.0f, 127.0f);
      q.codes[static_cast<size_t>(r * cols + c)] = static_cast<std::byte>(static_cast<int8_t>(code));
    }
  }
  return q;
}

}  // namespace

Status run_quantize_int8(ir::Graph& graph, const PassContext& ctx) {
  if (ctx.int8 == nullptr) return Status::ok();
  if (!graph.has_tensor_ops()) return invalid_argument("int8 calibration (--int8 --calib) applies to ONNX models");
  if (ctx.evaluator == nullptr) return internal_error("int8 calibration needs a backend to run the graph");
  if (ctx.int8->samples.empty()) return invalid_argument("int8 calibration has no samples");
  std::vector<Site> sites;
  std::set<ir::ValueId> watch;
  size_t products = 0;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const std::string& op = graph.nodes()[i].op;
    products += op == "Conv" || op == "MatMul" || op == "Gemm";
    if (auto s = candidate(graph, i)) {
      sites.push_back(*s);
      watch.insert(s->x);
    }
  }
  if (sites.empty()) {
    ctx.note("int8: no Conv or MatMul with a constant weight to quantise; the engine stays in floating point");
    return Status::ok();
  }

  std::map<ir::ValueId, ActivationHistogram> hist;
  SampleRunner runner(graph, *ctx.evaluator);
  const auto& samples = ctx.int8->samples;
  for (size_t s = 0; s < samples.size(); ++s) {
    KILN_RETURN_IF_ERROR(runner.run(s, samples[s], watch, [&](ir::ValueId id, const ir::Tensor& t) {
      if (t.dtype() == ir::DType::kF32) hist[id].observe_range(t.data<float>(), t.numel());
    }));
  }
  if (ctx.int8->calibrator != Calibrator::kMinMax) {
    for (size_t s = 0; s < samples.size(); ++s) {
      KILN_RETURN_IF_ERROR(runner.run(s, samples[s], watch, [&](ir::ValueId id, const ir::Tensor& t) {
        if (t.dtype() == ir::DType::kF32) hist[id].observe(t.data<float>(), t.numel());
      }));
    }
  }

  struct InputScale {
    double scale;
    int64_t zero_point;
  };
  std::map<ir::ValueId, InputScale> scales;
  for (const auto& [id, h] : hist) {
    const int levels = h.non_negative() ? 255 : 127;
    const double t = calibrate_threshold(h, ctx.int8->calibrator, levels, ctx.int8->percentile);
    scales[id] = {t / levels, h.non_negative() ? 0 : 128};
  }

  for (const Site& s : sites) {
    ir::Node& n = graph.nodes()[s.node];
    const ir::ValueId w = n.inputs[1];
    const std::string name = graph.value(w).name;
    const ir::WeightEntry entry = graph.weight(w);
    const ir::WeightLoader load = entry.load;
    const int64_t rows = s.rows, cols = s.cols;
    ir::WeightEntry codes;
    codes.shape = entry.shape;
    codes.dtype = ir::DType::kI8;
    codes.load_bytes = [=]() -> Expected<std::vector<std::byte>> {
      KILN_ASSIGN_OR_RETURN(QuantizedRows q, quantize_rows(load, rows, cols));
      return std::move(q.codes);
    };
    ir::WeightEntry row_scales;
    row_scales.shape = {rows};
    row_scales.load = [=]() -> Expected<std::vector<float>> {
      KILN_ASSIGN_OR_RETURN(QuantizedRows q, quantize_rows(load, rows, cols));
      return std::move(q.scales);
    };
    std::vector<ir::ValueId> inputs = {n.inputs[0], graph.add_weight(name + ".i8", std::move(codes)),
                                       graph.add_weight(name + ".i8_scale", std::move(row_scales))};
    if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) inputs.push_back(n.inputs[2]);
    ir::Node& node = graph.nodes()[s.node];  // add_weight may grow the value table, not the nodes
    node.inputs = std::move(inputs);
    node.op = node.op == "Conv" ? "kiln.QConv" : "kiln.QMatMul";
    node.attrs.erase("kiln.b_transposed");
    const InputScale& in = scales.at(s.x);
    node.attrs["kiln.x_scale"] = in.scale;
    node.attrs["kiln.x_zero_point"] = in.zero_point;
  }
  graph.prune_weights();
  ctx.note("int8: " + std::to_string(sites.size()) + " of " + std::to_string(products) +
           " Conv / MatMul / Gemm nodes quantised (" + calibrator_name(ctx.int8->calibrator) + " calibration over " +
           std::to_string(samples.size()) + " sample" + (samples.size() == 1 ? "" : "s") + ")");
  return Status::ok();
}

}  // namespace kiln::passes
