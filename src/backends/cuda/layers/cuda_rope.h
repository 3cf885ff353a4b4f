// Rotary position embedding on the GPU, the "rotate half" form of the CPU backend
// (backends/cpu/layers/rope.h): within each head, dimension j < rotary_dim / 2 pairs with
// j + rotary_dim / 2 and the pair turns by the fp32 angle float(pos) * inv_freq[j]; cos and sin
// of that angle are evaluated in double and rounded once, as on the CPU. Dimensions past
// rotary_dim pass through. The frequencies of every rope type (default, linear, llama3, dynamic
// NTK) are computed on the host with ir::rope_inv_freq (ir/position_encoding.h) and uploaded: once per model
// for the fixed types, once per step and sequence for dynamic NTK.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::cuda {

// x, y: [t, num_heads * head_dim] (y may equal x); positions: [t].
// inv_freq: [rotary_dim / 2] shared by every token when token_seq is null; otherwise
// [num_seqs, rotary_dim / 2], token i using row token_seq[i].
void launch_rope(const float* x, int64_t t, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
                 const int32_t* positions, const float* inv_freq, const int32_t* token_seq, float* y,
                 cudaStream_t stream);

// Two rotations of the same tokens in one launch (the queries and keys of an attention layer,
// which share positions, frequencies and head_dim): cos and sin are evaluated once for both.
struct RopeTensor {
  const float* x;
  float* y;
  int64_t num_heads;
};
void launch_rope_pair(RopeTensor a, RopeTensor b, int64_t t, int64_t head_dim, int64_t rotary_dim,
                      const int32_t* positions, const float* inv_freq, const int32_t* token_seq, cudaStream_t stream);

}  // namespace kiln::cuda
