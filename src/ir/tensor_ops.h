// The general tensor ops of the Kiln IR: the ONNX operators Kiln can run, each named and defined
// as in the ONNX operator specification at its latest opset (the importer's translators rewrite
// older opset forms into that one, e.g. Squeeze's `axes` attribute into its second input).
// Attributes keep their ONNX names and types; an ONNX tensor attribute becomes a weight input
// or a scalar attribute, as the translator says. Ops named "kiln.*" (kiln.Attention) and the
// "kiln." attributes of fused epilogues (ir/epilogue.h) are the build's own: passes make them,
// and the ONNX importer never reads them from a file.
//
// Shapes: an imported value carries the shape ONNX declares or infers (possibly symbolic or of
// unknown rank); kernels see concrete shapes at run time and check them there, naming the node.
// The registry below owns only the arity rules that hold whatever the shapes are.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::ir {

struct OpInfo;

// nullptr when `name` is not a tensor op.
const OpInfo* tensor_op_info(const std::string& name);
// Every tensor op, in registry order (for `kiln check` and the backends' coverage tests).
std::vector<std::string> tensor_op_names();

// Control flow. ONNX's If is imported flat (formats/onnx/onnx_model.cpp): the nodes of both branches
// join the graph, each carrying "kiln.guard", the pairs (condition value, branch) of the Ifs it
// sits in, outermost first; it runs only when every condition's scalar bool equals its branch
// (1: then, 0: else). kiln.Select(cond, then outputs..., else outputs...) then forwards the taken
// branch's values as the If's outputs. Values a branch that did not run would have made stay
// unset; only kiln.Select reads them.
struct Guard {
  ValueId cond;
  bool branch;
};
std::vector<Guard> node_guards(const Node& node);
// Whether a node with `guards` runs, reading conditions through `value` (which returns null for a
// value not made): a condition not made means an enclosing branch did not run.
bool guards_hold(const std::vector<Guard>& guards, const std::function<const Tensor*(ValueId)>& value);

// Checks input and output counts; the output shapes are those recorded on the output values.
Expected<std::vector<std::vector<int64_t>>> infer_tensor_shapes(const Graph& graph, const Node& node,
                                                                 const OpInfo& info);

}  // namespace kiln::ir
