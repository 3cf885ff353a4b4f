// Decode attention with the keys split across thread blocks ("split-K"): one block per (query
// row, head, split), so that a batch-1 decode step over a long context still fills the GPU.
// Each block scores its keys (one key per warp and step, lanes over float4 slices of the head),
// takes their softmax numerators against the block's own maximum, and has each of its 4 warps
// accumulate every 4th value row (lanes own float4 slices of the head); with one split the block
// writes the output, otherwise its unnormalised partial (max, sum, accumulator) for
// attention_combine_kernel to join. Head sizes 64 and 128 take attention_split_grouped_kernel,
// which reads several keys a warp at once.
#include <cfloat>
#include <cstdint>

#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/attention/cuda_kv.cuh"
#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/cuda_vec.cuh"

namespace kiln::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 512;        // keys scored per pass (shared memory)
constexpr int kMinSplitKeys = 16;  // a split takes at least this many keys
constexpr int kMaxHeadDim = 256;

__device__ float block_reduce(float v, float* scratch, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

// Joins the `splits` records of one (row, head) (splits <= kThreads) into out_row[0, d_head): each
// thread reads one split's maximum and sum, the block finds the joint maximum and each split's
// weight, and each thread then adds its dimensions over all splits with their loads in flight at
// once. The records come from the split kernel launched before; they are read through L2
// (__ldcg), as each is read once.
template <typename O>
__device__ void join_splits(const float* records, int splits, int d_head, O* out_row) {
  __shared__ float weight[kThreads];
  __shared__ float scratch[kWarps];
  const int64_t stride = d_head + 2;
  const int sp = threadIdx.x;
  float m = -FLT_MAX, l = 0.0f;
  if (sp < splits) {
    m = __ldcg(records + sp * stride);
    l = __ldcg(records + sp * stride + 1);
  }
  const float gm = block_reduce(m, scratch, true);
  const float w = l > 0.0f ? expf(m - gm) : 0.0f;  // a split with no keys counts for nothing
  weight[sp] = w;
  const float gl = block_reduce(l * w, scratch, false);  // its barriers publish weight[]
  for (int d = threadIdx.x; d < d_head; d += kThreads) {
    float a = 0.0f;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) {
      const float ws = weight[s];  // an empty split may not have written its accumulator
      const float x = __ldcg(records + s * stride + 2 + d);
      a += ws > 0.0f ? x * ws : 0.0f;
    }
    store1(out_row + d, a / gl);
  }
}

// The keys one block reads: query row blockIdx.x (at `pos`), split blockIdx.z of gridDim.z, keys
// [begin, end); with several splits, its record in `partial` ([t, heads, splits] records of
// (max, sum, acc[head_dim])), else nullptr.
struct SplitKeys {
  int pos, begin, end;
  float* record;
};

__device__ SplitKeys split_keys(StepTokens tokens, const AttentionShape& shape, float* partial) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  SplitKeys k;
  k.pos = tokens.positions[i];
  const int lo = shape.sliding_window > 0 ? max(0, k.pos - shape.sliding_window + 1) : 0;
  const int per_split = max(kMinSplitKeys, (k.pos + 1 - lo + splits - 1) / splits);
  k.begin = lo + split * per_split;
  k.end = min(k.pos + 1, k.begin + per_split);
  k.record = partial != nullptr
                 ? partial + ((i * shape.num_heads + h) * splits + split) * static_cast<int64_t>(shape.head_dim + 2)
                 : nullptr;
  return k;
}

// A split with no keys records an empty partial; true when there is nothing else to do.
__device__ bool empty_split(const SplitKeys& k) {
  if (k.begin < k.end) return false;
  if (k.record != nullptr && threadIdx.x == 0) {
    k.record[0] = -FLT_MAX;
    k.record[1] = 0.0f;
  }
  return true;
}

// The online softmax of one chunk: scores[0, n) (complete, after a barrier) become their
// numerators against the new running maximum; m and l move on. Returns the factor by which the
// accumulators so far must be scaled.
__device__ float chunk_softmax(float* scores, int n, float local_max, float* scratch, float& m, float& l) {
  const float m_new = fmaxf(m, block_reduce(local_max, scratch, true));
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    const float p = expf(scores[j] - m_new);
    scores[j] = p;
    local_sum += p;
  }
  const float sum = block_reduce(local_sum, scratch, false);  // its barriers publish scores[]
  const float corr = expf(m - m_new);
  l = l * corr + sum;
  m = m_new;
  return corr;
}

// After every warp wrote its accumulator (warp_acc rows `stride` floats apart) and a barrier:
// the output row out_row[0, d_head) with one split, else the split's record.
template <typename O>
__device__ void write_split(const float* warp_acc, int stride, int d_head, O* out_row, float* record, float m,
                            float l) {
  for (int d = threadIdx.x; d < d_head; d += kThreads) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) a += warp_acc[w * stride + d];
    if (record == nullptr) {
      store1(out_row + d, a / l);
    } else {
      record[2 + d] = a;
    }
  }
  if (record != nullptr && threadIdx.x == 0) {
    record[0] = m;
    record[1] = l;
  }
}

// kChunks: float4 slices per lane (head_dim <= 128 * kChunks); head_dim % 4 == 0.
template <int kChunks, typename T>
__global__ void __launch_bounds__(kThreads) attention_split_kernel(const float* q, StepTokens tokens,
                                                                   AttentionShape shape, PagedKv cache, float* out,
                                                                   float* partial) {
  kernel_prologue();
  __shared__ __align__(16) float qs[kMaxHeadDim];
  __shared__ float scores[kChunk];
  __shared__ int64_t offsets[kChunk];
  __shared__ float scratch[kWarps];
  __shared__ __align__(16) float warp_acc[kWarps][kMaxHeadDim];
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int d_head = shape.head_dim, d4 = d_head / 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = h / (shape.num_heads / shape.num_kv_heads);
  const int64_t q_row = static_cast<int64_t>(shape.num_heads) * d_head;
  const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * d_head;
  const SplitKeys keys = split_keys(tokens, shape, partial);
  if (empty_split(keys)) return;
  const int pos = keys.pos, begin = keys.begin, end = keys.end;
  const int32_t* table = cache.tables + static_cast<int64_t>(tokens.token_seq[i]) * cache.table_stride;
  const float slope = shape.alibi_slopes != nullptr ? shape.alibi_slopes[h] : 0.0f;
  for (int d = threadIdx.x; d < d_head; d += kThreads) qs[d] = q[i * q_row + static_cast<int64_t>(h) * d_head + d];
  __syncthreads();

  float m = -FLT_MAX, l = 0.0f;
  float4 acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int n = min(kChunk, end - c0);
    // Cache offsets of the chunk's keys first: the loops below then issue their loads without
    // waiting on a block-table read.
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const int kp = c0 + j;
      offsets[j] = (static_cast<int64_t>(table[kp / cache.block_size]) * cache.block_size + kp % cache.block_size) *
                       kv_row + static_cast<int64_t>(kv_head) * d_head;
    }
    __syncthreads();
    // Scores: one key per warp and step, lanes over float4 slices of the head (coalesced rows).
    float local_max = -FLT_MAX;
#pragma unroll 4
    for (int j = warp; j < n; j += kWarps) {
      const T* krow = static_cast<const T*>(cache.k) + offsets[j];
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int slice = lane + 32 * c;
        if (slice < d4) {
          const float4 a = reinterpret_cast<const float4*>(qs)[slice], b = load4(krow + 4 * slice);
          dot += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }
      }
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const float s = shape.scale * dot + slope * static_cast<float>(c0 + j - pos);
      if (lane == 0) scores[j] = s;
      local_max = fmaxf(local_max, s);
    }
    __syncthreads();  // scores[] complete before the softmax pass reads other warps' entries
    const float corr = chunk_softmax(scores, n, local_max, scratch, m, l);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      acc[c].x *= corr;
      acc[c].y *= corr;
      acc[c].z *= corr;
      acc[c].w *= corr;
    }
    // Warp w takes keys w, w + 4, ...: one coalesced value row per warp and step.
#pragma unroll 4
    for (int j = warp; j < n; j += kWarps) {
      const float p = scores[j];
      const T* vrow = static_cast<const T*>(cache.v) + offsets[j];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int slice = lane + 32 * c;
        if (slice < d4) {
          const float4 v = load4(vrow + 4 * slice);
          acc[c].x += p * v.x;
          acc[c].y += p * v.y;
          acc[c].z += p * v.z;
          acc[c].w += p * v.w;
        }
      }
    }
    __syncthreads();  // scores[] is rewritten by the next chunk
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int slice = lane + 32 * c;
    if (slice < d4) reinterpret_cast<float4*>(warp_acc[warp])[slice] = acc[c];
  }
  __syncthreads();
  write_split(&warp_acc[0][0], kMaxHeadDim, d_head, out + i * q_row + static_cast<int64_t>(h) * d_head, keys.record, m,
              l);
}

// Sixteen consecutive cache elements, widened.
__device__ __forceinline__ void load16(const float* p, float (&v)[16]) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(p) + c);
    v[4 * c] = f.x;
    v[4 * c + 1] = f.y;
    v[4 * c + 2] = f.z;
    v[4 * c + 3] = f.w;
  }
}
__device__ __forceinline__ void load16(const __nv_fp8_e4m3* p, float (&v)[16]) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 a = e4m3x2_to_float2(w[e]), b = e4m3x2_to_float2(w[e] >> 16);
    v[4 * e] = a.x;
    v[4 * e + 1] = a.y;
    v[4 * e + 2] = b.x;
    v[4 * e + 3] = b.y;
  }
}
__device__ __forceinline__ void load16(const __nv_bfloat16* p, float (&v)[16]) {
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + c);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[8 * c + 2 * e] = __uint_as_float(w[e] << 16);
      v[8 * c + 2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
    }
  }
}

// The same split as attention_split_kernel for head_dim D of 64 or 128, with each key read by a
// group of D / 16 lanes (16 elements, 32 or 64 bytes a lane) instead of by a whole warp: a warp
// has 32 / (D / 16) keys in flight per load and reduces each dot product over 3 (or 2) shuffles
// instead of 5. Batched decode steps are bound by reading the cache, and this keeps more of it in
// flight.
template <int D, typename T, typename O>
__global__ void __launch_bounds__(kThreads) attention_split_grouped_kernel(const float* q, StepTokens tokens,
                                                                           AttentionShape shape, PagedKv cache,
                                                                           O* out, float* partial) {
  kernel_prologue();
  constexpr int kLanes = D / 16;           // lanes sharing one key
  constexpr int kGroups = 32 / kLanes;     // keys a warp reads at once
  constexpr int kStep = kWarps * kGroups;  // keys the block reads at once
  __shared__ float scores[kChunk];
  __shared__ int64_t offsets[kChunk];
  __shared__ float scratch[kWarps];
  __shared__ __align__(16) float warp_acc[kWarps][D];
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int grp = lane / kLanes, li = lane % kLanes;
  const int kv_head = h / (shape.num_heads / shape.num_kv_heads);
  const int64_t q_row = static_cast<int64_t>(shape.num_heads) * D;
  const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * D;
  const SplitKeys keys = split_keys(tokens, shape, partial);
  if (empty_split(keys)) return;
  const int pos = keys.pos, begin = keys.begin, end = keys.end;
  const int32_t* table = cache.tables + static_cast<int64_t>(tokens.token_seq[i]) * cache.table_stride;
  const float slope = shape.alibi_slopes != nullptr ? shape.alibi_slopes[h] : 0.0f;
  float qv[16];
  load16(q + i * q_row + static_cast<int64_t>(h) * D + 16 * li, qv);
  const T* k_base = static_cast<const T*>(cache.k) + static_cast<int64_t>(kv_head) * D + 16 * li;
  const T* v_base = static_cast<const T*>(cache.v) + static_cast<int64_t>(kv_head) * D + 16 * li;

  float m = -FLT_MAX, l = 0.0f;
  float acc[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) acc[e] = 0.0f;
  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int n = min(kChunk, end - c0);
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const int kp = c0 + j;
      offsets[j] = (static_cast<int64_t>(table[kp / cache.block_size]) * cache.block_size + kp % cache.block_size) *
                   kv_row;
    }
    __syncthreads();
    // Scores: every lane takes part in each pass (the shuffles need the whole warp); a group past
    // the chunk's end reads nothing and records nothing.
    float local_max = -FLT_MAX;
#pragma unroll 2
    for (int j0 = warp * kGroups; j0 < n; j0 += kStep) {
      const int j = j0 + grp;
      float dot = 0.0f;
      if (j < n) {
        float kv[16];
        load16(k_base + offsets[j], kv);
#pragma unroll
        for (int e = 0; e < 16; ++e) dot += qv[e] * kv[e];
      }
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (j < n) {
        const float sc = shape.scale * dot + slope * static_cast<float>(c0 + j - pos);
        if (li == 0) scores[j] = sc;
        local_max = fmaxf(local_max, sc);
      }
    }
    __syncthreads();
    const float corr = chunk_softmax(scores, n, local_max, scratch, m, l);
#pragma unroll
    for (int e = 0; e < 16; ++e) acc[e] *= corr;
#pragma unroll 2
    for (int j = warp * kGroups + grp; j < n; j += kStep) {
      const float p = scores[j];
      float vv[16];
      load16(v_base + offsets[j], vv);
#pragma unroll
      for (int e = 0; e < 16; ++e) acc[e] += p * vv[e];
    }
    __syncthreads();  // scores[] and offsets[] are rewritten by the next chunk
  }
  // Join the warp's groups (lanes li, li + kLanes, ... hold the same dimensions), then the warps.
#pragma unroll
  for (int e = 0; e < 16; ++e) {
#pragma unroll
    for (int o = kLanes; o < 32; o <<= 1) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
  }
  if (grp == 0) {
#pragma unroll
    for (int e = 0; e < 16; e += 4) {
      *reinterpret_cast<float4*>(&warp_acc[warp][16 * li + e]) = make_float4(acc[e], acc[e + 1], acc[e + 2], acc[e + 3]);
    }
  }
  __syncthreads();
  write_split(&warp_acc[0][0], D, D, out + i * q_row + static_cast<int64_t>(h) * D, keys.record, m, l);
}

// One block per (query row, head): joins the splits' partials.
template <typename O>
__global__ void __launch_bounds__(kThreads) attention_combine_kernel(const float* partial, int splits,
                                                                     AttentionShape shape, O* out) {
  kernel_prologue();
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y, d_head = shape.head_dim;
  join_splits(partial + (i * shape.num_heads + h) * splits * static_cast<int64_t>(d_head + 2), splits, d_head,
              out + (i * shape.num_heads + h) * static_cast<int64_t>(d_head));
}

}  // namespace

bool attention_16_out_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

bool attention_split_supported(int head_dim) { return head_dim > 0 && head_dim % 4 == 0 && head_dim <= kMaxHeadDim; }

size_t attention_split_partial_floats(int64_t t, int num_heads, int head_dim, int splits) {
  return static_cast<size_t>(t) * static_cast<size_t>(num_heads) * static_cast<size_t>(splits) *
         static_cast<size_t>(head_dim + 2);
}

void launch_attention_split(const float* q, int64_t t, StepTokens tokens, const AttentionShape& shape, PagedKv cache,
                            int splits, float* partial, void* out, ActivationType out_type, cudaStream_t stream) {
  if (t <= 0) return;
  const dim3 grid(static_cast<unsigned>(t), static_cast<unsigned>(shape.num_heads), static_cast<unsigned>(splits));
  float* records = splits > 1 ? partial : nullptr;
  const int d = shape.head_dim;
  const bool wide = d > 128;
  const dim3 heads(static_cast<unsigned>(t), static_cast<unsigned>(shape.num_heads));
  if (d == 128 || d == 64) {
    auto go = [&](auto cache_element, auto out_element) {
      using T = decltype(cache_element);
      using O = decltype(out_element);
      launch(d == 128 ? attention_split_grouped_kernel<128, T, O> : attention_split_grouped_kernel<64, T, O>, grid,
             kThreads, 0, stream, q, tokens, shape, cache, static_cast<O*>(out), records);
      if (splits > 1) {
        launch(attention_combine_kernel<O>, heads, kThreads, 0, stream, partial, splits, shape, static_cast<O*>(out));
      }
    };
    auto with_cache = [&](auto out_element) {
      with_kv_element(cache.element, [&](auto cache_element) { go(cache_element, out_element); });
    };
    switch (out_type) {
      case ActivationType::kF32: with_cache(float{}); break;
      case ActivationType::kF16: with_cache(__half{}); break;
      case ActivationType::kBF16: with_cache(__nv_bfloat16{}); break;
    }
    return;
  }
  float* out_f = static_cast<float*>(out);
  with_kv_element(cache.element, [&](auto element) {
    using T = decltype(element);
    launch(wide ? attention_split_kernel<2, T> : attention_split_kernel<1, T>, grid, kThreads, 0, stream, q, tokens,
           shape, cache, out_f, records);
  });
  if (splits > 1) {
    launch(attention_combine_kernel<float>, heads, kThreads, 0, stream, partial, splits, shape, out_f);
  }
}

}  // namespace kiln::cuda
