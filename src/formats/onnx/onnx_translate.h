// The ONNX importer's per-op translators. One file per op family (onnx_ops_*.cpp) registers a
// translator for each ONNX op type it understands; a translator checks the node's attributes and
// opset-specific form and emits the equivalent Kiln tensor ops (ir/tensor_ops.h), which are
// ONNX's latest-opset definitions: an older form is rewritten (Squeeze's axes attribute becomes
// an input, opset-12 Softmax becomes Flatten + Softmax + Reshape).
//
// Ownership: the importer (onnx_model.cpp) owns the graph and creates the values named by the
// node's inputs and outputs; a translator only adds nodes, constants and temporaries through
// OnnxEmitter and must bind every output of the node.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::formats {

// One ONNX node as the translator sees it.
struct OnnxNode {
  std::string op_type;
  std::string name;    // unique in the graph
  int64_t opset = 0;   // of the node's domain
  std::vector<ir::ValueId> inputs;   // kNoValue for an absent optional input
  std::vector<ir::ValueId> outputs;  // values already made by the importer
  std::map<std::string, ir::Attr> attrs;                // non-tensor attributes
  std::map<std::string, ir::Tensor> tensor_attrs;       // tensor attributes, decoded

  bool has(const std::string& key) const { return attrs.count(key) || tensor_attrs.count(key); }
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  // "node 'NAME' (OpType): what" as an invalid_argument.
  Status error(const std::string& what) const;
  // The int attribute `key` (or `fallback`), refused outside [lo, hi].
  Expected<int64_t> int_in(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const;
  // The string attribute `key` (or `fallback`), refused unless one of `allowed`.
  Expected<std::string> string_in(const std::string& key, const std::string& fallback,
                                  const std::vector<std::string>& allowed) const;
  // The float attribute `key` (an int is widened), or `fallback`; an error if it has another type.
  Expected<double> float_in(const std::string& key, double fallback) const;
  // The ints / floats attribute `key`, empty when absent; an error if it has another type.
  Expected<std::vector<int64_t>> ints_in(const std::string& key) const;
  Expected<std::vector<double>> floats_in(const std::string& key) const;
  ir::ValueId input(size_t i) const { return i < inputs.size() ? inputs[i] : ir::kNoValue; }
};

class OnnxEmitter {
 public:
  explicit OnnxEmitter(ir::Graph& graph) : graph_(graph) {}
  ir::Graph& graph() { return graph_; }
  // A constant (weight) holding `t`, named after the node.
  ir::ValueId constant(const OnnxNode& node, const std::string& suffix, ir::Tensor t);
  ir::ValueId constant_i64(const OnnxNode& node, const std::string& suffix, const std::vector<int64_t>& values);
  // A new intermediate value of `dtype` whose shape is found at run time.
  ir::ValueId temp(const OnnxNode& node, const std::string& suffix, ir::DType dtype);
  // Appends a node. `name` must be unique (use the ONNX node's name, plus a suffix for helpers).
  void add(std::string op, std::string name, std::vector<ir::ValueId> inputs, std::vector<ir::ValueId> outputs,
           std::map<std::string, ir::Attr> attrs);
  // The node as is: same op type, inputs, outputs and attributes.
  void add_same(const OnnxNode& node) { add(node.op_type, node.name, node.inputs, node.outputs, node.attrs); }

 private:
  ir::Graph& graph_;
};

using OnnxTranslator = std::function<Status(const OnnxNode&, OnnxEmitter&)>;
using OnnxTranslatorTable = std::map<std::string, OnnxTranslator>;

// The translator of every op whose ONNX form is already Kiln's: the node as is.
inline Status translate_same(const OnnxNode& node, OnnxEmitter& out) {
  out.add_same(node);
  return Status::ok();
}

// The translator for ONNX op type `op_type` in the default domain, or nullptr.
const OnnxTranslator* onnx_translator(const std::string& op_type);

// Registration, one function per op family file.
void register_onnx_elementwise_ops(OnnxTranslatorTable& table);
void register_onnx_reduce_ops(OnnxTranslatorTable& table);
void register_onnx_tensor_ops(OnnxTranslatorTable& table);
void register_onnx_nn_ops(OnnxTranslatorTable& table);
void register_onnx_quantize_ops(OnnxTranslatorTable& table);
void register_onnx_signal_ops(OnnxTranslatorTable& table);
void register_onnx_text_ops(OnnxTranslatorTable& table);
void register_onnx_recurrent_ops(OnnxTranslatorTable& table);

}  // namespace kiln::formats
