#include "backends/cuda/attention/cuda_attention.h"

#include <cfloat>

#include "backends/cuda/attention/cuda_kv.cuh"
#include "backends/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 1024;  // keys scored per pass of the row kernel (shared memory: 4 KiB)
constexpr int kMaxHeadDim = 256;
constexpr int kPerThread = kMaxHeadDim / kThreads;

// Offset of position kp's row (kv head 0) in one layer's cache.
__device__ __forceinline__ int64_t slot_offset(const int32_t* table, int kp, int block_size, int64_t kv_row) {
  const int64_t block = table[kp / block_size];
  return (block * block_size + kp % block_size) * kv_row;
}

// One block per token: its k and v rows into the cache (of T elements).
template <typename T>
__global__ void kv_cache_store_kernel(const float* k, const float* v, int64_t kv_row, StepTokens tokens, PagedKv cache) {
  kernel_prologue();
  const int64_t i = blockIdx.x;
  const int32_t* table = cache.tables + static_cast<int64_t>(tokens.token_seq[i]) * cache.table_stride;
  const int64_t dst = slot_offset(table, tokens.positions[i], cache.block_size, kv_row);
  T* ck = static_cast<T*>(cache.k);
  T* cv = static_cast<T*>(cache.v);
  for (int64_t c = threadIdx.x; c < kv_row; c += kThreads) {
    store1(ck + dst + c, k[i * kv_row + c]);
    store1(cv + dst + c, v[i * kv_row + c]);
  }
}

__device__ float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) s += scratch[w];
  return s;
}

// One block per (query row, head). Keys are scored kChunk at a time (one thread per key),
// then the chunk's softmax numerators weight the values (one thread per output dimension,
// reading value rows coalesced); an online softmax joins the chunks.
template <bool kVec, typename T>
__global__ void __launch_bounds__(kThreads) attention_rows_kernel(const float* q, StepTokens tokens,
                                                                  AttentionShape shape, PagedKv cache, float* out) {
  kernel_prologue();
  __shared__ __align__(16) float qs[kMaxHeadDim];
  __shared__ float scores[kChunk];
  __shared__ float scratch[kThreads / 32];
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int d_head = shape.head_dim;
  const int kv_head = h / (shape.num_heads / shape.num_kv_heads);
  const int64_t q_row = static_cast<int64_t>(shape.num_heads) * d_head;
  const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * d_head;
  const int pos = tokens.positions[i];
  const int lo = shape.sliding_window > 0 ? max(0, pos - shape.sliding_window + 1) : 0;
  const int32_t* table = cache.tables + static_cast<int64_t>(tokens.token_seq[i]) * cache.table_stride;
  const float slope = shape.alibi_slopes != nullptr ? shape.alibi_slopes[h] : 0.0f;
  for (int d = threadIdx.x; d < d_head; d += kThreads) qs[d] = q[i * q_row + static_cast<int64_t>(h) * d_head + d];
  __syncthreads();
  const T* ck = static_cast<const T*>(cache.k);
  const T* cv = static_cast<const T*>(cache.v);

  float m = -FLT_MAX, l = 0.0f;
  float acc[kPerThread] = {};
  for (int c0 = lo; c0 <= pos; c0 += kChunk) {
    const int n = min(kChunk, pos + 1 - c0);
    float local_max = -FLT_MAX;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const int kp = c0 + j;
      const T* krow = ck + slot_offset(table, kp, cache.block_size, kv_row) + kv_head * d_head;
      float dot = 0.0f;
      if (kVec) {
        const float4* q4 = reinterpret_cast<const float4*>(qs);
        for (int d = 0; d < d_head / 4; ++d) {
          const float4 a = q4[d], b = load4(krow + 4 * d);
          dot += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }
      } else {
        for (int d = 0; d < d_head; ++d) dot += qs[d] * kv_load(krow + d);
      }
      const float s = shape.scale * dot + slope * static_cast<float>(kp - pos);
      scores[j] = s;
      local_max = fmaxf(local_max, s);
    }
    const float m_new = fmaxf(m, block_max(local_max, scratch));
    float local_sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const float p = expf(scores[j] - m_new);
      scores[j] = p;
      local_sum += p;
    }
    const float chunk_sum = block_sum(local_sum, scratch);  // its barriers also publish scores[]
    const float corr = expf(m - m_new);
    l = l * corr + chunk_sum;
    m = m_new;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) acc[e] *= corr;
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
      const float p = scores[j];
      const T* vrow = cv + slot_offset(table, c0 + j, cache.block_size, kv_row) + kv_head * d_head;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        const int d = threadIdx.x + e * kThreads;
        if (d < d_head) acc[e] += p * kv_load(vrow + d);
      }
    }
    __syncthreads();  // scores[] is rewritten by the next chunk
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int d = threadIdx.x + e * kThreads;
    if (d < d_head) out[i * q_row + static_cast<int64_t>(h) * d_head + d] = acc[e] * inv;
  }
}

}  // namespace

bool attention_rows_supported(int head_dim) { return head_dim > 0 && head_dim <= kMaxHeadDim; }

void launch_kv_cache_store(const float* k, const float* v, int64_t t, int64_t kv_row, StepTokens tokens, PagedKv cache,
                           cudaStream_t stream) {
  if (t <= 0) return;
  with_kv_element(cache.element, [&](auto element) {
    using T = decltype(element);
    launch(kv_cache_store_kernel<T>, static_cast<unsigned>(t), kThreads, 0, stream, k, v, kv_row, tokens, cache);
  });
}

void launch_attention_rows(const float* q, int64_t t, StepTokens tokens, const AttentionShape& shape, PagedKv cache,
                           float* out, cudaStream_t stream) {
  if (t <= 0) return;
  const dim3 grid(static_cast<unsigned>(t), static_cast<unsigned>(shape.num_heads));
  const bool vec = shape.head_dim % 4 == 0;
  with_kv_element(cache.element, [&](auto element) {
    using T = decltype(element);
    launch(vec ? attention_rows_kernel<true, T> : attention_rows_kernel<false, T>, grid, kThreads, 0, stream, q,
           tokens, shape, cache, out);
  });
}

}  // namespace kiln::cuda
