// Paged KV cache and causal attention over a ragged batch, for the CPU backend.
//
// Ownership: the KV cache manager (llm/) owns the cache memory and the block tables; the
// executor owns q, k, v and out. attention() writes the step's k and v rows into the cache
// blocks the tables name and reads every visible cached row; it never allocates cache blocks
// and never reads outside the blocks a sequence's table lists.
//
// Cache layout of one layer, k and v alike: [num_blocks, block_size, num_kv_heads, head_dim]
// fp32, bf16 or e4m3, so one token's keys for all kv heads are one contiguous row.
#pragma once

#include <cstdint>

#include "runtime/kv_cache_dtype.h"

namespace kiln::cpu {

// A cache element (runtime/kv_cache_dtype.h): fp32, bf16 or an OCP e4m3 byte (base/half.h), widened
// exactly when read; the arithmetic is fp32 for all three.
using runtime::KvCacheDtype;

// One layer's cache: k and v each point at num_blocks * block_size * num_kv_heads * head_dim
// elements of `element`.
struct KvCacheLayer {
  void* k;
  void* v;
  int64_t num_blocks;
  int64_t block_size;
  KvCacheDtype element = KvCacheDtype::kF32;
};

// A ragged batch. Sequence s owns query rows [query_start[s], query_start[s+1]) of this step
// (query_start: [num_seqs + 1], non-decreasing); those tokens sit at positions context_len[s],
// context_len[s] + 1, ... (context_len: [num_seqs], the tokens already in the cache for s).
// block_tables[s][i] is the cache block holding positions [i*block_size, (i+1)*block_size) of
// sequence s; it covers every position below context_len[s] + the step's tokens of s.
struct AttentionBatch {
  int64_t num_seqs;
  const int32_t* query_start;
  const int32_t* context_len;
  const int32_t* const* block_tables;
};

struct AttentionShape {
  int64_t num_heads;
  // Divides num_heads; query head h reads kv head h / (num_heads / num_kv_heads) (GQA).
  int64_t num_kv_heads;
  int64_t head_dim;
  float scale;  // usually 1 / sqrt(head_dim)
  // 0 = none; else a key at kpos is visible from pos iff pos - kpos < sliding_window (HF Mistral).
  int64_t sliding_window;
  const float* alibi_slopes;  // [num_heads] (ir::alibi_slopes), or nullptr for no ALiBi bias
};

// Writes the step's rows into the cache: row i of k and v (k: [t, num_kv_heads*head_dim] with row
// stride k_stride floats, v likewise) goes to the slot of its position in its sequence's block.
void kv_cache_store(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                    const AttentionBatch& batch, int64_t num_kv_heads, int64_t head_dim,
                    KvCacheLayer cache);

// Stores the step's k, v (kv_cache_store), then for every query row and head h attends over the
// positions max(0, pos - sliding_window + 1) .. pos of the row's own sequence:
//   w[kpos]    = softmax over kpos of (scale * q[i, h, :] . K[kpos] + slope[h] * (kpos - pos))
//   out[i, h, :] = sum over kpos of w[kpos] * V[kpos]
// q: [t, num_heads*head_dim] with row stride q_stride floats; out: [t, num_heads*head_dim]
// (must not overlap q, k or v). A row's result depends only on its query, its position and the
// cached rows it sees, so it is bit-identical however a sequence's tokens are split into steps
// or batched with other sequences. The inner loops are AVX2 when isa_active() allows it.
void attention(const float* q, int64_t q_stride, const float* k, int64_t k_stride, const float* v,
               int64_t v_stride, const AttentionBatch& batch, const AttentionShape& shape,
               KvCacheLayer cache, float* out);

}  // namespace kiln::cpu
