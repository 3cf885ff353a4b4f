// The attention inputs of one step in one kernel: the fused q/k/v projection's output split into
// its three parts, the rotary embedding of the queries and keys (the CPU's "rotate half" form,
// as launch_rope computes it, cos and sin in double rounded once), and the keys and values
// written into their tokens' paged-cache slots (as launch_kv_cache_store writes them). It
// replaces a split, a rope pair and the cache store: one launch instead of three, each token's
// heads spread over several thread blocks.
// All pointers are device memory owned by the caller (CudaBackend); outputs must not alias qkv.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/cuda_activation_type.h"

namespace kiln::cuda {

struct QkvShape {
  int num_heads;     // query heads
  int num_kv_heads;  // key and value heads
  int head_dim;
  int rotary_dim;  // <= head_dim, even; dimensions past it pass through
};

// Whether the kernel takes this shape (head_dim even and <= 256, rotary_dim even and <= head_dim).
bool qkv_rope_store_supported(const QkvShape& shape);

// qkv: [t, (num_heads + 2 * num_kv_heads) * head_dim] = [q | k | v] per token, of qkv_type
// (fp32, or the fp16 / bf16 a product wrote it in: widened as read, the rotation in fp32).
// q: [t, num_heads * head_dim], k, v: [t, num_kv_heads * head_dim] (rotated q and k, plain v;
// k and v may be null: then only the cache gets them, at each token's position). inv_freq as launch_rope takes it.
void launch_qkv_rope_store(const void* qkv, ActivationType qkv_type, int64_t t, const QkvShape& shape,
                           StepTokens tokens, const float* inv_freq, const int32_t* token_seq, float* q, float* k,
                           float* v, PagedKv cache, cudaStream_t stream);

}  // namespace kiln::cuda
