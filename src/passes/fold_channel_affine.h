// Folding a per-output-channel affine y * s + t into the weights of the Conv or ConvTranspose
// that produced y (fuse_conv_batchnorm, fuse_epilogues):
//   W'[m] = W[m] * s[m],  B'[m] = B[m] * s[m] + t[m]   (B = 0 when absent)
// The new weights are new entries with composed loaders, computed in double and rounded once;
// the old ones are left for dead-node elimination.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

// The output channel count of Conv or ConvTranspose `conv` whose weight has shape `w`
// (Conv: [M, C/g, k...]; ConvTranspose: [C, M/g, k...]).
int64_t conv_output_channels(const ir::Node& conv, const std::vector<int64_t>& w);

// y * s + t per output channel folded into `conv` (s or t may be empty: 1 or 0). `tag` names the
// new weights. False, changing nothing, when the weight or bias is not an f32 constant.
bool fold_channel_affine(ir::Graph& g, ir::Node& conv, const std::string& tag, std::vector<double> s,
                         std::vector<double> t);

// BatchNormalization node `bn` as y * s + t over `channels` channels:
// s = scale / sqrt(var + epsilon), t = bias - mean * s; nullopt when a parameter is not an f32
// constant of `channels` values.
struct ChannelAffine {
  std::vector<double> s, t;
};
std::optional<ChannelAffine> batchnorm_affine(const ir::Graph& g, const ir::Node& bn, int64_t channels);

}  // namespace kiln::passes
