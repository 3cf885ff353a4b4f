// Attention over the paged KV cache on the GPU, for ragged batches (prefill chunks and decode
// tokens of many sequences in one step), with the semantics of the CPU backend
// (backends/cpu/layers/attention.h): causal, GQA (query head h reads kv head h / (num_heads /
// num_kv_heads)), sliding window (a key at kpos is visible from pos iff pos - kpos < window),
// ALiBi (+ slope[h] * (kpos - pos)), softmax in fp32.
//
// The step's k and v rows are first written into the cache (launch_kv_cache_store); the
// attention kernels then read every key, the step's own included, from the cache:
//   launch_attention_split  decode steps: one thread block per (query row, head, split of the
//                           keys), joined by a second kernel when there are several splits;
//   launch_attention_rows   one thread block per (query row, head): any head_dim up to 256 (the
//                           fallback for head sizes the others do not take);
//   launch_attention_tiles  one thread block per (tile of up to kAttentionTileRows consecutive
//                           query rows of one sequence, head), keys staged through shared
//                           memory in tiles with an online softmax: prefill; needs head_dim % 4
//                           == 0 and <= 256;
//   launch_attention_mma    the same tiles on tensor cores (fp16 products; bf16 ones over a
//                           bf16 cache): prefill of half-precision engines.
// Cache layout per layer, k and v alike: [num_blocks, block_size, num_kv_heads, head_dim] elements
// of fp32, bf16 or e4m3 (KvCacheDtype).
// All pointers are device memory; the caller (CudaBackend) owns them. Kernels never read cache
// blocks outside the tables they are given. The outputs are fp32, except that the split and
// tensor-core kernels also write fp16 or bf16 for head sizes 64 and 128
// (attention_16_out_supported): the element a following rounded product reads (cuda_gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/cuda_activation_type.h"
#include "base/status.h"
#include "runtime/kv_cache_dtype.h"

namespace kiln::cuda {

struct AttentionShape {
  int num_heads;
  int num_kv_heads;
  int head_dim;
  float scale;
  int sliding_window;          // 0 = none
  const float* alibi_slopes;   // [num_heads] on the device, or nullptr
};

// A cache element (runtime/kv_cache_dtype.h): a float, a bf16 value or an OCP e4m3 byte
// (cuda_kv.cuh); every kernel takes all three.
using runtime::KvCacheDtype;

// One layer's paged cache and the step's block tables: sequence s's table is
// tables[s * table_stride ...], entry b naming the block of positions [b*block_size, (b+1)*block_size).
struct PagedKv {
  void* k;
  void* v;
  int block_size;
  const int32_t* tables;
  int table_stride;
  KvCacheDtype element = KvCacheDtype::kF32;
};

// The step's tokens: token i belongs to sequence token_seq[i] and sits at positions[i].
struct StepTokens {
  const int32_t* token_seq;
  const int32_t* positions;
};

// A prefill tile: rows [row_begin, row_begin + rows) of the step, consecutive tokens of `seq`.
struct AttentionTile {
  int32_t seq;
  int32_t row_begin;
  int32_t rows;
  int32_t unused;
};
inline constexpr int kAttentionTileRows = 32;     // the most rows of a tile launch_attention_tiles takes
inline constexpr int kAttentionMmaTileRows = 128;  // the most launch_attention_mma takes (see below)

// Raises the shared-memory limit of the tile kernels; once per process, before any launch.
Status attention_init();

// Whether the kernels handle this head size (rows: <= 256; tiles: also a multiple of 4).
bool attention_rows_supported(int head_dim);
bool attention_tiles_supported(int head_dim);

// k, v: [t, num_kv_heads * head_dim] -> the cache slots of their tokens' positions.
void launch_kv_cache_store(const float* k, const float* v, int64_t t, int64_t kv_row, StepTokens tokens, PagedKv cache,
                           cudaStream_t stream);

// Decode attention split across `splits` blocks per (row, head) (cuda_attention_decode.cu): for
// head_dim % 4 == 0, <= 256; splits <= 128. With splits > 1, `partial` holds
// attention_split_partial_floats(t, num_heads, head_dim, splits) floats of device scratch.
bool attention_split_supported(int head_dim);
size_t attention_split_partial_floats(int64_t t, int num_heads, int head_dim, int splits);
void launch_attention_split(const float* q, int64_t t, StepTokens tokens, const AttentionShape& shape, PagedKv cache,
                            int splits, float* partial, void* out, ActivationType out_type, cudaStream_t stream);

// Whether launch_attention_split and launch_attention_mma write 16-bit outputs for head_dim.
bool attention_16_out_supported(int head_dim);

// Prefill tiles on tensor cores (cuda_attention_mma.cu): q, k, v and the softmax numerators
// rounded to fp16, fp32 accumulation and softmax; for head_dim % 32 == 0, <= 128. The backend
// takes it for engines whose weights are fp16 or bf16.
bool attention_mma_supported(int head_dim);
// The most rows of a tile launch_attention_mma takes over this cache: 128 over a bf16 or e4m3
// cache, 64 over a float one.
int attention_mma_tile_rows(KvCacheDtype element);
Status attention_mma_init();  // called by attention_init
void launch_attention_mma(const float* q, const AttentionTile* tiles, int64_t num_tiles, StepTokens tokens,
                          const AttentionShape& shape, PagedKv cache, void* out, ActivationType out_type,
                          cudaStream_t stream);

// q, out: [t, num_heads * head_dim].
void launch_attention_rows(const float* q, int64_t t, StepTokens tokens, const AttentionShape& shape, PagedKv cache,
                           float* out, cudaStream_t stream);
void launch_attention_tiles(const float* q, const AttentionTile* tiles, int64_t num_tiles, StepTokens tokens,
                            const AttentionShape& shape, PagedKv cache, float* out, cudaStream_t stream);

}  // namespace kiln::cuda
