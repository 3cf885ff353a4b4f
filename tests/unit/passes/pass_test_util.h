// What the pass tests share: weights with known contents, a builder for small general (ONNX-like)
// graphs, a decoder-like LLM graph, a kernel tuner with fixed timings, and ways to look at a
// graph after a pass. Everything is inline: the tests of one module compile as one unity file.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "passes/pass.h"

namespace kiln::passes::test_util {

using ir::DType;
using ir::Graph;
using ir::kTokens;
using ir::ValueId;

// An f32 weight holding `values` (row-major) under `shape`.
inline ir::WeightEntry f32_weight(std::vector<int64_t> shape, std::vector<float> values) {
  ir::WeightEntry w;
  w.shape = std::move(shape);
  w.load = [values = std::move(values)]() -> Expected<std::vector<float>> { return values; };
  return w;
}

// An f32 weight whose element i (row-major) is base + i, so concatenations and transposes are checkable.
inline ir::WeightEntry counting(std::vector<int64_t> shape, float base) {
  std::vector<float> v(static_cast<size_t>(ir::shape_numel(shape)));
  std::iota(v.begin(), v.end(), base);
  return f32_weight(std::move(shape), std::move(v));
}

// An i64 weight holding `values` as a 1-D tensor.
inline ir::WeightEntry i64_weight(std::vector<int64_t> values) {
  ir::WeightEntry w;
  w.shape = {static_cast<int64_t>(values.size())};
  w.dtype = DType::kI64;
  w.load_bytes = [values = std::move(values)]() -> Expected<std::vector<std::byte>> {
    std::vector<std::byte> b(values.size() * sizeof(int64_t));
    if (!b.empty()) std::memcpy(b.data(), values.data(), b.size());
    return b;
  };
  return w;
}

// The contents of f32 weight `id` (empty, with a test failure, when it does not load).
inline std::vector<float> load_f32(const Graph& g, ValueId id) {
  if (id == ir::kNoValue || !g.value(id).is_weight) {
    ADD_FAILURE() << "value " << id << " is not a weight";
    return {};
  }
  const ir::WeightEntry& w = g.weight(id);
  if (!w.load) {
    ADD_FAILURE() << "weight '" << g.value(id).name << "' has no f32 loader";
    return {};
  }
  auto v = w.load();
  if (!v) {
    ADD_FAILURE() << v.status().message();
    return {};
  }
  EXPECT_EQ(static_cast<int64_t>(v->size()), w.numel()) << g.value(id).name;
  return std::move(*v);
}

inline size_t count_op(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node.op == op;
  return n;
}

// The one node with op `op` (null, with a test failure, when there are none or several).
inline const ir::Node* only_node(const Graph& g, const std::string& op) {
  const ir::Node* found = nullptr;
  for (const auto& node : g.nodes()) {
    if (node.op != op) continue;
    if (found != nullptr) {
      ADD_FAILURE() << "more than one " << op << " node";
      return nullptr;
    }
    found = &node;
  }
  if (found == nullptr) ADD_FAILURE() << "no " << op << " node in\n" << ir::print_graph(g);
  return found;
}

inline const ir::Node* node_named(const Graph& g, const std::string& name) {
  for (const auto& node : g.nodes()) {
    if (node.name == name) return &node;
  }
  return nullptr;
}

// The graph's structure as text (nodes, inputs, outputs, attributes, weight formats) plus the
// names of its weights: equal before and after a pass that must not fire.
inline std::string snapshot(const Graph& g) {
  std::string s = ir::print_graph(g) + "weights:";
  for (const auto& [name, w] : g.weights()) s += " " + name;
  return s;
}

// A general graph under construction, as an exporter writes one: f32 inputs, constants, and nodes
// of one output whose shapes are known only at run time unless given.
struct TensorGraphBuilder {
  Graph g;
  int next = 0;

  ValueId input(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::kF32) {
    const ValueId v = g.add_value(name, dtype, std::move(shape));
    g.inputs().push_back(v);
    return v;
  }
  ValueId constant(std::vector<int64_t> shape, std::vector<float> values) {
    return g.add_weight("c" + std::to_string(next++), f32_weight(std::move(shape), std::move(values)));
  }
  ValueId scalar(float v) { return constant({}, {v}); }
  ValueId axes(std::vector<int64_t> a) { return g.add_weight("c" + std::to_string(next++), i64_weight(std::move(a))); }
  // A node named op + a counter, with one output "<name>.out".
  ValueId node(const std::string& op, std::vector<ValueId> in, std::map<std::string, ir::Attr> attrs = {},
               DType dtype = DType::kF32) {
    const std::string name = op + std::to_string(next++);
    const ValueId out = g.add_value(name + ".out", dtype, {});
    g.value(out).shape_known = false;
    ir::Node n;
    n.op = op;
    n.name = name;
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attrs = std::move(attrs);
    g.nodes().push_back(std::move(n));
    return out;
  }
  void output(ValueId v) { g.outputs().push_back(v); }
};

// x -> q, k, v projections (with bias) -> attention; x -> gate, up -> silu(gate) * up; the output
// projection's weight is stored [in, out] and transposed at build time.
inline Graph decoder_like() {
  Graph g;
  ValueId x = g.add_value("x", DType::kF32, {kTokens, 4});
  ValueId pos = g.add_value("positions", DType::kI32, {kTokens});
  g.inputs() = {x, pos};
  auto proj = [&](const std::string& name, int64_t n, float base) {
    ValueId w = g.add_weight(name + ".w", counting({n, 4}, base));
    ValueId b = g.add_weight(name + ".b", counting({n}, base));
    return g.add_node1("matmul", name, {x, w, b});
  };
  ValueId q = proj("q", 4, 0), k = proj("k", 2, 100), v = proj("v", 2, 200);
  ValueId a = g.add_node1("attention", "attn", {q, k, v},
                          {{"layer", int64_t{0}}, {"num_heads", int64_t{2}}, {"num_kv_heads", int64_t{1}},
                           {"head_dim", int64_t{2}}, {"scale", 0.5}});
  ValueId wg = g.add_weight("gate.w", counting({6, 4}, 300));
  ValueId wu = g.add_weight("up.w", counting({6, 4}, 400));
  ValueId gate = g.add_node1("matmul", "gate", {a, wg});
  ValueId up = g.add_node1("matmul", "up", {a, wu});
  ValueId s = g.add_node1("silu", "act", {gate});
  ValueId m = g.add_node1("mul", "gate_mul", {s, up});
  ValueId wt = g.add_weight("out.w", counting({6, 4}, 500));
  ValueId t = g.add_node1("transpose", "out.w.T", {wt});
  g.outputs() = {g.add_node1("matmul", "out", {m, t})};
  return g;
}

// Two kernels for every format, "slow" and "fast", whose timings say so; counts the timings.
class FakeTuner : public KernelTuner {
 public:
  std::string target() const override { return "cpu-test"; }
  std::vector<std::string> matmul_candidates(ir::WeightFormat) const override { return {"slow", "fast"}; }
  double time_matmul(const std::string& kernel, ir::WeightFormat, int64_t, int64_t, int64_t) override {
    ++calls;
    return kernel == "fast" ? 1.0 : 2.0;
  }
  int calls = 0;
};

// Checks the memory plan of an LLM graph: every activation has a 16-float-aligned offset inside
// the arena, and no two activations that are live at once (producer to last reader, graph inputs
// from the start, graph outputs to the end) share floats.
inline void expect_plan_never_overlaps(const Graph& g) {
  const auto n = static_cast<int64_t>(g.nodes().size());
  std::vector<int64_t> def(g.values().size(), -1), last(g.values().size(), -1);
  for (int64_t i = 0; i < n; ++i) {
    for (ValueId in : g.nodes()[static_cast<size_t>(i)].inputs) last[static_cast<size_t>(in)] = i;
    for (ValueId out : g.nodes()[static_cast<size_t>(i)].outputs) def[static_cast<size_t>(out)] = i;
  }
  for (ValueId o : g.outputs()) last[static_cast<size_t>(o)] = n;
  std::vector<ValueId> acts;
  for (const auto& v : g.values()) {
    if (!v.is_weight && v.arena_offset >= 0) acts.push_back(v.id);
  }
  auto size_of = [](const ir::Value& v) { return v.shape.size() == 2 ? v.shape[1] : int64_t{1}; };
  for (ValueId a : acts) {
    const auto& va = g.value(a);
    EXPECT_EQ(va.arena_offset % 16, 0) << va.name;
    EXPECT_LE(va.arena_offset + size_of(va), g.arena_per_token()) << va.name;
    for (ValueId b : acts) {
      if (a >= b) continue;
      const auto& vb = g.value(b);
      const auto ia = static_cast<size_t>(a), ib = static_cast<size_t>(b);
      const bool live_together = def[ia] <= std::max(last[ib], def[ib]) && def[ib] <= std::max(last[ia], def[ia]);
      const bool overlap =
          va.arena_offset < vb.arena_offset + size_of(vb) && vb.arena_offset < va.arena_offset + size_of(va);
      EXPECT_FALSE(live_together && overlap) << va.name << " and " << vb.name;
    }
  }
}

}  // namespace kiln::passes::test_util
