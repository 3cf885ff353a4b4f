// The prefill attention kernel: one thread block per (tile of up to kAttentionTileRows query
// rows of one sequence, head). Keys and values come through shared memory kBlockKeys at a time;
// each of the 4 warps owns 8 query rows, lane j scores key j of the tile for all 8 rows, and
// the online softmax (running max and sum per row) rescales the output accumulators, which
// each lane holds for its slice of head dimensions (float4 chunks d = 4 * (lane + 32 c)).
#include <cfloat>

#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/attention/cuda_kv.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kAttentionTileRows / kWarps;  // 8
constexpr int kBlockKeys = 32;                              // one key per lane
constexpr int kMaxHeadDim = 256;

// Shared memory: Q [rows, D], K [keys, D + 4] (padding: lanes reading different keys hit
// different banks), V [keys, D], P [warps, rows per warp, keys].
size_t tile_smem_bytes(int d) {
  return static_cast<size_t>(kAttentionTileRows * d + kBlockKeys * (d + 4) + kBlockKeys * d +
                             kWarps * kRowsPerWarp * kBlockKeys) *
         sizeof(float);
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// kChunks: float4 chunks of the head each lane owns (D <= 128 * kChunks).
template <int kChunks, typename T>
__global__ void __launch_bounds__(kThreads) attention_tiles_kernel(const float* q, const AttentionTile* tiles,
                                                                   StepTokens tokens, AttentionShape shape,
                                                                   PagedKv cache, float* out) {
  kernel_prologue();
  extern __shared__ float4 smem4[];
  const int d_head = shape.head_dim, d4 = d_head / 4, k_stride = d_head + 4;
  float* qs = reinterpret_cast<float*>(smem4);
  float* ks = qs + kAttentionTileRows * d_head;
  float* vs = ks + kBlockKeys * k_stride;
  float* ps = vs + kBlockKeys * d_head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const AttentionTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y;
  const int kv_head = h / (shape.num_heads / shape.num_kv_heads);
  const int64_t q_row = static_cast<int64_t>(shape.num_heads) * d_head;
  const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * d_head;
  const int32_t* table = cache.tables + static_cast<int64_t>(tile.seq) * cache.table_stride;
  const int pos0 = tokens.positions[tile.row_begin];
  const float slope = shape.alibi_slopes != nullptr ? shape.alibi_slopes[h] : 0.0f;

  for (int idx = threadIdx.x; idx < kAttentionTileRows * d4; idx += kThreads) {
    const int r = idx / d4, c = idx - r * d4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < tile.rows) {
      v = reinterpret_cast<const float4*>(q + (tile.row_begin + r) * q_row + static_cast<int64_t>(h) * d_head)[c];
    }
    reinterpret_cast<float4*>(qs)[idx] = v;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp];
  float4 acc[kRowsPerWarp][kChunks];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -FLT_MAX;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[r][c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int kv_hi = pos0 + tile.rows - 1;
  const int kv_lo = shape.sliding_window > 0 ? max(0, pos0 - shape.sliding_window + 1) : 0;
  float* p_rows = ps + warp * kRowsPerWarp * kBlockKeys;

  for (int kt = kv_lo; kt <= kv_hi; kt += kBlockKeys) {
    __syncthreads();  // the previous tile's K and V are consumed (and Q is stored, first time)
    for (int idx = threadIdx.x; idx < kBlockKeys * d4; idx += kThreads) {
      const int j = idx / d4, c = idx - j * d4;
      const int kp = kt + j;
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (kp <= kv_hi) {
        const int64_t off = (static_cast<int64_t>(table[kp / cache.block_size]) * cache.block_size +
                             kp % cache.block_size) * kv_row + static_cast<int64_t>(kv_head) * d_head;
        kv = load4(static_cast<const T*>(cache.k) + off + 4 * c);
        vv = load4(static_cast<const T*>(cache.v) + off + 4 * c);
      }
      reinterpret_cast<float4*>(ks + j * k_stride)[c] = kv;
      reinterpret_cast<float4*>(vs + j * d_head)[c] = vv;
    }
    __syncthreads();

    // Scores of key kt + lane against the warp's rows.
    float s[kRowsPerWarp] = {};
    const float4* k4 = reinterpret_cast<const float4*>(ks + lane * k_stride);
    for (int c = 0; c < d4; ++c) {
      const float4 kc = k4[c];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        s[r] += dot4(reinterpret_cast<const float4*>(qs + (warp * kRowsPerWarp + r) * d_head)[c], kc);
      }
    }
    const int kp = kt + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int row = warp * kRowsPerWarp + r;
      const int pos = pos0 + row;
      const int lo = shape.sliding_window > 0 ? pos - shape.sliding_window + 1 : 0;
      const bool valid = row < tile.rows && kp <= pos && kp >= lo;
      const float score = valid ? shape.scale * s[r] + slope * static_cast<float>(kp - pos) : -FLT_MAX;
      const float m_new = fmaxf(m[r], warp_max(score));
      const float p = valid ? expf(score - m_new) : 0.0f;
      const float corr = expf(m[r] - m_new);  // 1 while no key was visible yet
      l[r] = l[r] * corr + warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        acc[r][c].x *= corr;
        acc[r][c].y *= corr;
        acc[r][c].z *= corr;
        acc[r][c].w *= corr;
      }
      p_rows[r * kBlockKeys + lane] = p;
    }
    __syncwarp();
    const int keys = min(kBlockKeys, kv_hi - kt + 1);
    for (int j = 0; j < keys; ++j) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int chunk = lane + 32 * c;
        if (chunk < d4) {
          const float4 v = reinterpret_cast<const float4*>(vs + j * d_head)[chunk];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
            const float p = p_rows[r * kBlockKeys + j];
            acc[r][c].x += p * v.x;
            acc[r][c].y += p * v.y;
            acc[r][c].z += p * v.z;
            acc[r][c].w += p * v.w;
          }
        }
      }
    }
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = warp * kRowsPerWarp + r;
    if (row >= tile.rows) continue;
    const float inv = 1.0f / l[r];
    float* o = out + (tile.row_begin + row) * q_row + static_cast<int64_t>(h) * d_head;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int chunk = lane + 32 * c;
      if (chunk < d4) {
        reinterpret_cast<float4*>(o)[chunk] =
            make_float4(acc[r][c].x * inv, acc[r][c].y * inv, acc[r][c].z * inv, acc[r][c].w * inv);
      }
    }
  }
}

}  // namespace

Status attention_init() {
  const int bytes = static_cast<int>(tile_smem_bytes(kMaxHeadDim));
  const auto raise = [bytes](const void* kernel) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  };
  cudaError_t err = cudaSuccess;
  for (KvCacheDtype element : {KvCacheDtype::kF32, KvCacheDtype::kBF16, KvCacheDtype::kFP8}) {
    with_kv_element(element, [&](auto e) {
      using T = decltype(e);
      if (err == cudaSuccess) err = raise(reinterpret_cast<const void*>(attention_tiles_kernel<1, T>));
      if (err == cudaSuccess) err = raise(reinterpret_cast<const void*>(attention_tiles_kernel<2, T>));
    });
  }
  KILN_CUDA_RETURN_IF_ERROR(err);
  return attention_mma_init();
}

bool attention_tiles_supported(int head_dim) { return head_dim > 0 && head_dim % 4 == 0 && head_dim <= kMaxHeadDim; }

void launch_attention_tiles(const float* q, const AttentionTile* tiles, int64_t num_tiles, StepTokens tokens,
                            const AttentionShape& shape, PagedKv cache, float* out, cudaStream_t stream) {
  if (num_tiles <= 0) return;
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(shape.num_heads));
  const size_t smem = tile_smem_bytes(shape.head_dim);
  const bool wide = shape.head_dim > 128;
  with_kv_element(cache.element, [&](auto element) {
    using T = decltype(element);
    launch(wide ? attention_tiles_kernel<2, T> : attention_tiles_kernel<1, T>, grid, kThreads, smem, stream, q, tiles,
           tokens, shape, cache, out);
  });
}

}  // namespace kiln::cuda
