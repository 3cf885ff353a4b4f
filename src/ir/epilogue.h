// A pointwise epilogue that the build fuses into a Conv, ConvTranspose, Gemm or MatMul node
// (passes/fuse_epilogues.cpp): the kernel applies it to each output element as it writes it,
// instead of separate nodes making one pass each over the output:
//   y = activation(y) * scale + shift
// It is stored as node attributes under "kiln." names, so that it survives the engine file like
// any other attribute and the node keeps its ONNX op name. A MatMul may also carry a bias as a
// third input (added before the activation), as Gemm does.
#pragma once

#include <optional>
#include <string>

#include "ir/graph.h"

namespace kiln::ir {

enum class Activation {
  kNone, kRelu, kLeakyRelu, kSigmoid, kTanh, kHardSigmoid, kHardSwish, kClip, kSwish, kGelu, kGeluTanh
};

struct Epilogue {
  Activation activation = Activation::kNone;
  // The activation's parameters: LeakyRelu alpha; HardSigmoid alpha, beta; Clip min (alpha) and
  // max (beta); Swish x * sigmoid(alpha * x).
  double alpha = 0.0, beta = 0.0;
  double scale = 1.0, shift = 0.0;

  bool empty() const { return activation == Activation::kNone && scale == 1.0 && shift == 0.0; }
};

// The activation named `op` ("Relu", "HardSwish", ...; also "Swish", and "GeluTanh" for Gelu's
// tanh approximation), or nullopt.
std::optional<Activation> activation_from_name(const std::string& op);
const char* activation_name(Activation a);

// The node's epilogue (empty when it has none).
Epilogue node_epilogue(const Node& node);
void set_node_epilogue(Node& node, const Epilogue& e);

// One element through the epilogue, in double: the reference the kernels' float paths follow.
double apply_epilogue(const Epilogue& e, double y);

}  // namespace kiln::ir
