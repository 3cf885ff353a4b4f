#include "passes/fold_channel_affine.h"

#include <cmath>

#include "passes/pattern.h"

namespace kiln::passes {
namespace {

// The output channel of weight element `index` (ConvTranspose: output channel
// (c / (C/g)) * (M/g) + m of element [c, m, k...]).
int64_t channel_of(const ir::Node& conv, const std::vector<int64_t>& w, int64_t numel, int64_t index) {
  if (conv.op == "Conv") return index / (numel / w[0]);
  const int64_t group = conv.attr_int("group", 1), cg = w[0] / group, mg = w[1];
  const int64_t per = numel / (w[0] * mg);  // kernel positions
  const int64_t c = index / (mg * per), m = (index / per) % mg;
  return (c / cg) * mg + m;
}

}  // namespace

int64_t conv_output_channels(const ir::Node& conv, const std::vector<int64_t>& w) {
  return conv.op == "Conv" ? w[0] : w[1] * conv.attr_int("group", 1);
}

bool fold_channel_affine(ir::Graph& g, ir::Node& conv, const std::string& tag, std::vector<double> s,
                         std::vector<double> t) {
  const ir::ValueId w = conv.inputs[1];
  const ir::ValueId b = conv.inputs.size() > 2 ? conv.inputs[2] : ir::kNoValue;
  if (!g.value(w).is_weight || g.weight(w).dtype != ir::DType::kF32 || g.weight(w).shape.size() < 3) return false;
  if (b != ir::kNoValue && (!g.value(b).is_weight || g.weight(b).dtype != ir::DType::kF32)) return false;
  const ir::WeightEntry& we = g.weight(w);
  const std::vector<int64_t> wshape = we.shape;
  const int64_t channels = conv_output_channels(conv, wshape), numel = we.numel();
  if (b != ir::kNoValue && g.weight(b).numel() != channels) return false;
  if (!s.empty()) {
    const ir::WeightLoader load_w = we.load;
    const ir::Node shape_of = conv;
    ir::WeightEntry nw;
    nw.shape = wshape;
    nw.load = [=]() -> Expected<std::vector<float>> {
      KILN_ASSIGN_OR_RETURN(std::vector<float> v, load_w());
      for (int64_t i = 0; i < numel; ++i) {
        float& x = v[static_cast<size_t>(i)];
        x = static_cast<float>(x * s[static_cast<size_t>(channel_of(shape_of, wshape, numel, i))]);
      }
      return v;
    };
    conv.inputs[1] = g.add_weight(conv.name + ".scaled_" + tag + ".weight", std::move(nw));
  }
  if (t.empty() && (s.empty() || b == ir::kNoValue)) return true;
  const ir::WeightLoader load_b = b != ir::kNoValue ? g.weight(b).load : ir::WeightLoader{};
  ir::WeightEntry nb;
  nb.shape = {channels};
  nb.load = [=]() -> Expected<std::vector<float>> {
    std::vector<float> v(static_cast<size_t>(channels), 0.0f);
    if (load_b) {
      KILN_ASSIGN_OR_RETURN(v, load_b());
    }
    for (size_t m = 0; m < v.size(); ++m) {
      double x = v[m];
      if (!s.empty()) x *= s[m];
      if (!t.empty()) x += t[m];
      v[m] = static_cast<float>(x);
    }
    return v;
  };
  conv.inputs.resize(3);
  conv.inputs[2] = g.add_weight(conv.name + ".folded_" + tag + ".bias", std::move(nb));
  return true;
}

std::optional<ChannelAffine> batchnorm_affine(const ir::Graph& g, const ir::Node& bn, int64_t channels) {
  if (bn.op != "BatchNormalization" || bn.inputs.size() != 5) return std::nullopt;
  std::vector<std::vector<float>> p;  // scale, bias, mean, var
  for (size_t i = 1; i < 5; ++i) {
    auto v = f32_constant(g, bn.inputs[i]);
    if (!v || static_cast<int64_t>(v->size()) != channels) return std::nullopt;
    p.push_back(std::move(*v));
  }
  const double eps = bn.attr_float("epsilon", 1e-5);
  ChannelAffine a;
  for (size_t m = 0; m < static_cast<size_t>(channels); ++m) {
    const double s = p[0][m] / std::sqrt(static_cast<double>(p[3][m]) + eps);
    a.s.push_back(s);
    a.t.push_back(p[1][m] - p[2][m] * s);
  }
  return a;
}

}  // namespace kiln::passes
