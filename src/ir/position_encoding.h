// The position math that the rope and attention ops' attributes describe (ops.h), computed on the
// host once per model (or per step, for dynamic NTK) and handed to every backend's kernels:
// a rope node's frequencies and an ALiBi attention node's slopes. The rotation itself is each
// backend's kernel (backends/cpu/layers/rope.h, backends/cuda/layers/cuda_rope.h).
//
// The frequencies of each rope type that Hugging Face transformers supports for our
// architectures follow its modeling_rope_utils step for step, in fp32, so that every backend
// rotates by the angles the reference model uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ir {

// The rope settings of a model, as found in its config.json (rope_theta, rope_scaling).
struct RopeParams {
  double theta = 10000.0;
  std::string type = "default";          // "default" | "linear" | "dynamic" | "llama3"
  double factor = 1.0;                   // linear, dynamic, llama3
  double low_freq_factor = 1.0;          // llama3
  double high_freq_factor = 4.0;         // llama3
  int64_t original_max_position = 8192;  // llama3: the pre-training context length
  int64_t max_position = 2048;           // dynamic: max_position_embeddings
};

// The settings a rope node carries as attributes (theta, type, factor, low_freq_factor,
// high_freq_factor, original_max_position, max_position; absent ones take their defaults, the
// two positions 0). Not validated: see rope_params_validate.
RopeParams rope_params(const Node& node);

// Checks that `p` describes a rope the backends compute, for heads rotating `rotary_dim`
// dimensions. Call it once when a model is loaded; rope_inv_freq assumes it passed.
Status rope_params_validate(const RopeParams& p, int64_t rotary_dim);

// inv_freq: [rotary_dim / 2], computed with the same fp32 operations, in the same order, as
// transformers' modeling_rope_utils, so results agree to the last bit wherever the libm
// functions do. seq_len matters for "dynamic" only: the length of the sequence including the
// tokens of this step (HF uses max(position_ids) + 1); at or below max_position the default
// frequencies are returned.
std::vector<float> rope_inv_freq(const RopeParams& p, int64_t rotary_dim, int64_t seq_len);

// ALiBi slopes, [num_heads], as Baichuan-13B and BLOOM define them: for a power of two n,
// slope[i] = 2^(-8 (i+1) / n); otherwise the slopes of the closest smaller power of two c,
// followed by every other slope (the 1st, 3rd, ...) of 2c, until there are num_heads.
std::vector<float> alibi_slopes(int64_t num_heads);

}  // namespace kiln::ir
