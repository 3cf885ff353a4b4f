// The Kiln intermediate representation: a Graph of Nodes over Values.
//
// A Value is either an activation (produced by a node or fed as a graph input at run time) or a
// weight (a constant whose contents live in the WeightTable). Values have any rank and any of
// the DTypes below. A dimension is either fixed at build time (>= 0) or symbolic (< 0):
//   kTokens, kRows     the LLM path's step dimensions (tokens in this step, logit rows);
//   kUnknownDim        a dimension found only at run time, with no name;
//   named symbols      dim_symbol("batch") <= kFirstNamedDim: a dimension with a name, equal
//                      wherever the name appears (ONNX dim_param), listed in Graph::dim_names().
// A Value whose rank is not known at build time (an ONNX intermediate without shape
// information) has shape_known == false and an empty shape.
//
// Ops come in two families (ops.h): the LLM ops the architecture builders emit, over [tokens, C]
// activations with step-level semantics (paged attention, rope), and the general tensor ops the
// ONNX importer emits, named as in ONNX ("Conv", "Gather") with ONNX's latest-opset semantics.
// Both live in one Graph and go through the same passes, engine file and backends.
//
// Ownership: the Graph owns its nodes and values and the WeightTable. Builders (formats/) create
// graphs; passes (passes/) mutate them in place; the engine writer serialises them; the runtime
// reads a deserialised, immutable copy.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "ir/weight_format.h"
#include "nlohmann/json_fwd.hpp"

namespace kiln::ir {

// Element types. The first two keep their values (engine files store names, not numbers).
enum class DType : uint8_t { kF32, kI32, kF16, kBF16, kF64, kI8, kU8, kI16, kU16, kI64, kU32, kU64, kBool };
std::string_view dtype_name(DType dtype);            // "f32", "i64", "bool", ...
std::optional<DType> dtype_from_name(std::string_view name);
size_t dtype_size(DType dtype);                          // bytes per element
bool dtype_is_float(DType dtype);                        // f16, bf16, f32, f64

constexpr int64_t kTokens = -1;       // symbolic: tokens in this step
constexpr int64_t kRows = -2;         // symbolic: rows whose logits are requested
constexpr int64_t kUnknownDim = -3;   // symbolic: known only at run time, unnamed
constexpr int64_t kFirstNamedDim = -16;  // named symbols count down from here
inline bool dim_is_static(int64_t d) { return d >= 0; }

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

struct Value {
  ValueId id = kNoValue;
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  bool shape_known = true;  // false: rank and dims are found at run time (shape is empty)
  bool is_weight = false;   // contents live in the WeightTable under `name`
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
// The contents of a weight of another dtype (integer indices, shapes, masks, f64): its elements,
// little-endian, as the engine stores them.
using WeightBytesLoader = std::function<Expected<std::vector<std::byte>>()>;

// A weight of any rank. f32 weights are produced by `load` and stored in `format` as rows of
// cols() elements (rows() = the product of the leading dimensions); weights of any other dtype
// are produced by `load_bytes` and stored as their raw elements (format stays kF32, unused).
struct WeightEntry {
  std::vector<int64_t> shape;                   // logical shape, every dimension static
  DType dtype = DType::kF32;
  WeightFormat format = WeightFormat::kF32;     // how the engine stores an f32 weight
  WeightLoader load;                            // build time, f32: produces numel() floats
  WeightBytesLoader load_bytes;                 // build time, other dtypes: numel() elements
  std::span<const std::byte> stored;            // run time: the bytes in `format` (or raw)
  int64_t rows() const {
    int64_t r = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
    return r;
  }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  int64_t numel() const { return rows() * cols(); }
  // Bytes the engine stores for it.
  uint64_t stored_bytes() const;
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

  // Named symbolic dimensions: dim_symbol() returns the dimension for `name`, adding it if new;
  // dim_names()[kFirstNamedDim - d] is the name of dimension d.
  int64_t dim_symbol(const std::string& name);
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  std::vector<std::string>& dim_names() { return dim_names_; }
  // "3", "T" (tokens), "R" (rows), "batch", "?" for dimension d.
  std::string dim_str(int64_t d) const;
  std::string shape_str(const Value& v) const;

  // True when any node is a general tensor op (an imported ONNX graph).
  bool has_tensor_ops() const;

  // Activation arena size in floats per token of max_tokens (set by the memory plan).
  int64_t arena_per_token() const { return arena_per_token_; }
  void set_arena_per_token(int64_t n) { arena_per_token_ = n; }

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::map<std::string, WeightEntry> weights_;
  std::vector<std::string> dim_names_;
  int64_t arena_per_token_ = 0;
};

// Structural checks: ids in range, each activation produced once and before use, inputs and
// outputs of every node agree with the op's shape rules. Names the first offending node.
Status verify(const Graph& graph);

// Human-readable listing, one node a line; and Graphviz DOT.
std::string print_graph(const Graph& graph);
std::string print_graph_dot(const Graph& graph);
// A node's attributes as print_graph shows them: "{key=value, ...}".
std::string print_attrs(const Node& node);

// Serialisation of the graph structure (not the weight contents) for the engine file.
nlohmann::json graph_to_json(const Graph& graph);
Expected<Graph> graph_from_json(const nlohmann::json& json);

}  // namespace kiln::ir
