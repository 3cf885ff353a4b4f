// The Kiln intermediate representation: a Graph of Nodes over Values.
//
// A Value is either an activation (produced by a node or fed as a graph input at run time) or a
// weight (a constant whose contents live in the WeightTable). Shapes may hold the symbolic
// dimension kTokens (the number of tokens in a step) or kRows (the number of rows whose logits
// are requested); every other dimension is fixed at build time.
//
// Ownership: the Graph owns its nodes and values and the WeightTable. Builders (formats/) create
// graphs; passes (passes/) mutate them in place; the engine writer serialises them; the runtime
// reads a deserialised, immutable copy.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "ir/weight_format.h"
#include "nlohmann/json_fwd.hpp"

namespace kiln::ir {

enum class DType : uint8_t { kF32, kI32 };
std::string_view dtype_name(DType dtype);

constexpr int64_t kTokens = -1;  // symbolic: tokens in this step
constexpr int64_t kRows = -2;    // symbolic: rows whose logits are requested

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

struct Value {
  ValueId id = kNoValue;
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  bool is_weight = false;  // contents live in the WeightTable under `name`
  // Set by the memory plan for activations: the value's buffer starts at
  // arena + arena_offset * max_tokens floats (every activation is [tokens or rows, C]).
  int64_t arena_offset = -1;
};

// Node attributes: a small JSON-like bag (ints, floats, strings, int lists, float lists).
using Attr = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

struct Node {
  std::string op;    // registered op name, see ops.h
  std::string name;  // unique, e.g. "layers.3.attn"
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::map<std::string, Attr> attrs;

  int64_t attr_int(const std::string& key, int64_t fallback = 0) const;
  double attr_float(const std::string& key, double fallback = 0.0) const;
  std::string attr_str(const std::string& key, const std::string& fallback = "") const;
  std::vector<int64_t> attr_ints(const std::string& key) const;
  std::vector<double> attr_floats(const std::string& key) const;
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
};

// The contents of one weight, produced on demand as float so that passes can compose transforms
// (concatenate, transpose, normalise) without holding a model's weights in memory at once.
using WeightLoader = std::function<Expected<std::vector<float>>()>;

struct WeightEntry {
  std::vector<int64_t> shape;                   // logical shape, 1-D or 2-D
  WeightFormat format = WeightFormat::kF32;     // how the engine stores it
  WeightLoader load;                            // build time: produces shape-many floats
  std::span<const std::byte> stored;            // run time: the bytes in `format`
  int64_t rows() const { return shape.size() == 2 ? shape[0] : 1; }
  int64_t cols() const { return shape.back(); }
};

class Graph {
 public:
  ValueId add_value(std::string name, DType dtype, std::vector<int64_t> shape);
  ValueId add_weight(std::string name, WeightEntry entry);
  // Adds a node and creates its outputs; returns the output ids.
  std::vector<ValueId> add_node(std::string op, std::string name, std::vector<ValueId> inputs,
                                std::map<std::string, Attr> attrs, size_t num_outputs = 1);
  ValueId add_node1(std::string op, std::string name, std::vector<ValueId> inputs,
                    std::map<std::string, Attr> attrs = {}) {
    return add_node(std::move(op), std::move(name), std::move(inputs), std::move(attrs), 1)[0];
  }

  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  Value& value(ValueId id) { return values_.at(static_cast<size_t>(id)); }
  const std::vector<Value>& values() const { return values_; }
  std::vector<Value>& values() { return values_; }
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }

  std::vector<ValueId>& inputs() { return inputs_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  std::vector<ValueId>& outputs() { return outputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  ValueId find_value(const std::string& name) const;  // kNoValue if absent

  std::map<std::string, WeightEntry>& weights() { return weights_; }
  const std::map<std::string, WeightEntry>& weights() const { return weights_; }
  const WeightEntry& weight(ValueId id) const { return weights_.at(value(id).name); }
  WeightEntry& weight(ValueId id) { return weights_.at(value(id).name); }

  // Nodes that consume `id`, by index into nodes().
  std::vector<size_t> consumers(ValueId id) const;
  // Index of the node producing `id`, or -1 for graph inputs and weights.
  int64_t producer(ValueId id) const;

  // Drops weights no value refers to and weight values no node reads.
  void prune_weights();
  // Replaces every use of `from` (node inputs, graph outputs) by `to`.
  void replace_uses(ValueId from, ValueId to);

  // Activation arena size in floats per token of max_tokens (set by the memory plan).
  int64_t arena_per_token() const { return arena_per_token_; }
  void set_arena_per_token(int64_t n) { arena_per_token_ = n; }

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::map<std::string, WeightEntry> weights_;
  int64_t arena_per_token_ = 0;
};

// Structural checks: ids in range, each activation produced once and before use, inputs and
// outputs of every node agree with the op's shape rules. Names the first offending node.
Status verify(const Graph& graph);

// Human-readable listing, one node a line; and Graphviz DOT.
std::string print_graph(const Graph& graph);
std::string print_graph_dot(const Graph& graph);

// Serialisation of the graph structure (not the weight contents) for the engine file.
nlohmann::json graph_to_json(const Graph& graph);
Expected<Graph> graph_from_json(const nlohmann::json& json);

}  // namespace kiln::ir
