#include "ir/epilogue.h"

#include <algorithm>
#include <cmath>

namespace kiln::ir {
namespace {

struct Named {
  Activation a;
  const char* name;
};
constexpr Named kNames[] = {
    {Activation::kRelu, "Relu"},       {Activation::kLeakyRelu, "LeakyRelu"},     {Activation::kSigmoid, "Sigmoid"},
    {Activation::kTanh, "Tanh"},       {Activation::kHardSigmoid, "HardSigmoid"}, {Activation::kHardSwish, "HardSwish"},
    {Activation::kClip, "Clip"},       {Activation::kSwish, "Swish"},             {Activation::kGelu, "Gelu"},
    {Activation::kGeluTanh, "GeluTanh"},
};

}  // namespace

std::optional<Activation> activation_from_name(const std::string& op) {
  for (const auto& n : kNames) {
    if (op == n.name) return n.a;
  }
  return std::nullopt;
}

const char* activation_name(Activation a) {
  for (const auto& n : kNames) {
    if (n.a == a) return n.name;
  }
  return "";
}

Epilogue node_epilogue(const Node& node) {
  Epilogue e;
  if (!node.has_attr("kiln.activation") && !node.has_attr("kiln.scale") && !node.has_attr("kiln.shift")) return e;
  e.activation = activation_from_name(node.attr_str("kiln.activation")).value_or(Activation::kNone);
  e.alpha = node.attr_float("kiln.alpha", 0.0);
  e.beta = node.attr_float("kiln.beta", 0.0);
  e.scale = node.attr_float("kiln.scale", 1.0);
  e.shift = node.attr_float("kiln.shift", 0.0);
  return e;
}

void set_node_epilogue(Node& node, const Epilogue& e) {
  for (const char* key : {"kiln.activation", "kiln.alpha", "kiln.beta", "kiln.scale", "kiln.shift"}) node.attrs.erase(key);
  if (e.activation != Activation::kNone) {
    node.attrs["kiln.activation"] = std::string(activation_name(e.activation));
    node.attrs["kiln.alpha"] = e.alpha;
    node.attrs["kiln.beta"] = e.beta;
  }
  if (e.scale != 1.0) node.attrs["kiln.scale"] = e.scale;
  if (e.shift != 0.0) node.attrs["kiln.shift"] = e.shift;
}

double apply_epilogue(const Epilogue& e, double y) {
  switch (e.activation) {
    case Activation::kNone: break;
    case Activation::kRelu: y = std::max(y, 0.0); break;
    case Activation::kLeakyRelu: y = y >= 0 ? y : e.alpha * y; break;
    case Activation::kSigmoid: y = 1.0 / (1.0 + std::exp(-y)); break;
    case Activation::kTanh: y = std::tanh(y); break;
    case Activation::kHardSigmoid: y = std::clamp(e.alpha * y + e.beta, 0.0, 1.0); break;
    case Activation::kHardSwish: y = y * std::clamp(y / 6.0 + 0.5, 0.0, 1.0); break;
    case Activation::kClip: y = std::clamp(y, e.alpha, e.beta); break;
    case Activation::kSwish: y = y / (1.0 + std::exp(-e.alpha * y)); break;
    case Activation::kGelu: y = 0.5 * y * (1.0 + std::erf(y / std::sqrt(2.0))); break;
    case Activation::kGeluTanh: y = 0.5 * y * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (y + 0.044715 * y * y * y))); break;
  }
  return y * e.scale + e.shift;
}

}  // namespace kiln::ir
