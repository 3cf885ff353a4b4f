// The prefill attention kernel on tensor cores (head_dim a multiple of 32 up to 128): one thread
// block of 8 warps per (tile of up to kAttentionMmaTileRows query rows of one sequence, head);
// every K/V tile read from the cache serves the tile's 64 rows. Per tile of kKeys keys: K and V are read from the paged
// cache and rounded to fp16 in shared memory, S = Q K^T comes from wmma 16x16x16 products with
// fp32 accumulation, the online softmax (fp32: running max, sum, rescale of the output) runs
// over S in shared memory, and O += P V is again a wmma product whose fp32 accumulator lives in
// shared memory between tiles. Causal masking, GQA, sliding window and ALiBi as in the other
// kernels; q, k, v, p rounded to fp16 (relative error about 1e-3 against fp32).
#include <cuda_fp16.h>
#include <mma.h>

#include <cfloat>

#include "backends/cuda/cuda_attention.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_kv.cuh"

namespace kiln::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kRows = kAttentionMmaTileRows;  // 64: four 16-row fragments
constexpr int kWarps = kRows / 8;            // two a 16-row fragment: S and O split by columns
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 64;                  // four 16-key fragments
constexpr int kMaxDim = 128;
constexpr int kPadH = 8;  // halves of padding per shared row (bank spread; keeps 16-byte rows)
constexpr int kPadF = 4;  // floats of padding per shared row
constexpr int kBatch = 8;  // K and V float4 loads in flight per thread

struct Layout {
  int dh, df;  // row strides: halves (Q, K, V), floats (O)
  size_t q, k, v, s, p, o, stats, bytes;
};

__host__ __device__ inline Layout layout_for(int d) {
  Layout l{};
  l.dh = d + kPadH;
  l.df = d + kPadF;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t offset = at;
    at += (bytes + 127) / 128 * 128;
    return offset;
  };
  l.q = take(sizeof(__half) * kRows * l.dh);
  l.k = take(sizeof(__half) * kKeys * l.dh);
  l.v = take(sizeof(__half) * kKeys * l.dh);
  l.s = take(sizeof(float) * kRows * (kKeys + kPadF));
  l.p = take(sizeof(__half) * kRows * (kKeys + kPadH));
  l.o = take(sizeof(float) * kRows * l.df);
  l.stats = take(sizeof(float) * kRows * 3);  // m, l, correction
  l.bytes = at;
  return l;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) attention_mma_kernel(const float* q, const AttentionTile* tiles,
                                                                 StepTokens tokens, AttentionShape shape,
                                                                 PagedKv cache, float* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int d = shape.head_dim;
  const Layout L = layout_for(d);
  auto* qs = reinterpret_cast<__half*>(smem + L.q);
  auto* ks = reinterpret_cast<__half*>(smem + L.k);
  auto* vs = reinterpret_cast<__half*>(smem + L.v);
  auto* ss = reinterpret_cast<float*>(smem + L.s);
  auto* ps = reinterpret_cast<__half*>(smem + L.p);
  auto* os = reinterpret_cast<float*>(smem + L.o);
  float* row_m = reinterpret_cast<float*>(smem + L.stats);
  float* row_l = row_m + kRows;
  float* row_c = row_l + kRows;
  constexpr int s_stride = kKeys + kPadF, p_stride = kKeys + kPadH;

  const int warp = threadIdx.x / 32;
  const AttentionTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y;
  const int kv_head = h / (shape.num_heads / shape.num_kv_heads);
  const int64_t q_row = static_cast<int64_t>(shape.num_heads) * d;
  const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * d;
  const int32_t* table = cache.tables + static_cast<int64_t>(tile.seq) * cache.table_stride;
  const int pos0 = tokens.positions[tile.row_begin];
  const float slope = shape.alibi_slopes != nullptr ? shape.alibi_slopes[h] : 0.0f;
  const int d4 = d / 4;

  for (int idx = threadIdx.x; idx < kRows * d4; idx += kThreads) {
    const int r = idx / d4, c = idx - r * d4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < tile.rows) v = reinterpret_cast<const float4*>(q + (tile.row_begin + r) * q_row + static_cast<int64_t>(h) * d)[c];
    __half2* dst = reinterpret_cast<__half2*>(qs + r * L.dh + 4 * c);
    dst[0] = __floats2half2_rn(v.x, v.y);
    dst[1] = __floats2half2_rn(v.z, v.w);
  }
  for (int idx = threadIdx.x; idx < kRows * L.df; idx += kThreads) os[idx] = 0.0f;
  if (threadIdx.x < kRows) {
    row_m[threadIdx.x] = -FLT_MAX;
    row_l[threadIdx.x] = 0.0f;
  }

  const int kv_hi = pos0 + tile.rows - 1;
  const int kv_lo = shape.sliding_window > 0 ? max(0, pos0 - shape.sliding_window + 1) : 0;
  // S fragments of this warp: rows 16 * (warp / 2), keys 32 * (warp % 2) + {0, 16}.
  const int s_rb = warp / 2, s_cb = (warp % 2) * 2;
  // O fragments of this warp: rows 16 * (warp / 2), dimensions from (warp % 2) * d / 2 in 16s.
  const int o_frags = d / 32;  // per warp: (d / 16) column fragments split over two warps
  const int o_c0 = (warp % 2) * o_frags;

  for (int kt = kv_lo; kt <= kv_hi; kt += kKeys) {
    __syncthreads();  // the last tile's K, V, P are consumed; Q, O, stats written (first time)
    // kBatch float4 of K and of V in flight per thread before any is stored: the stores to
    // shared memory would otherwise wait for each load in turn.
    for (int base = threadIdx.x; base < kKeys * d4; base += kThreads * kBatch) {
      float4 kr[kBatch], vr[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads;
        const int j = idx / d4, c = idx - j * d4;
        const int kp = kt + j;
        kr[b] = make_float4(0.f, 0.f, 0.f, 0.f);
        vr[b] = kr[b];
        if (idx < kKeys * d4 && kp <= kv_hi) {
          const int64_t off = (static_cast<int64_t>(table[kp / cache.block_size]) * cache.block_size +
                               kp % cache.block_size) * kv_row + static_cast<int64_t>(kv_head) * d;
          kr[b] = kv_ldg4(static_cast<const T*>(cache.k) + off + 4 * c);
          vr[b] = kv_ldg4(static_cast<const T*>(cache.v) + off + 4 * c);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads;
        if (idx >= kKeys * d4) break;
        const int j = idx / d4, c = idx - j * d4;
        __half2* kd = reinterpret_cast<__half2*>(ks + j * L.dh + 4 * c);
        kd[0] = __floats2half2_rn(kr[b].x, kr[b].y);
        kd[1] = __floats2half2_rn(kr[b].z, kr[b].w);
        __half2* vd = reinterpret_cast<__half2*>(vs + j * L.dh + 4 * c);
        vd[0] = __floats2half2_rn(vr[b].x, vr[b].y);
        vd[1] = __floats2half2_rn(vr[b].z, vr[b].w);
      }
    }
    __syncthreads();

    // S = Q K^T: K stored [key, dim] row-major is K^T column-major.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
      wmma::fill_fragment(acc[0], 0.0f);
      wmma::fill_fragment(acc[1], 0.0f);
      for (int kk = 0; kk < d; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, qs + s_rb * 16 * L.dh + kk, L.dh);
#pragma unroll
        for (int f = 0; f < 2; ++f) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
          wmma::load_matrix_sync(b, ks + (s_cb + f) * 16 * L.dh + kk, L.dh);
          wmma::mma_sync(acc[f], a, b, acc[f]);
        }
      }
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        wmma::store_matrix_sync(ss + s_rb * 16 * s_stride + (s_cb + f) * 16, acc[f], s_stride, wmma::mem_row_major);
      }
    }
    __syncthreads();

    // Online softmax: 4 threads a row, 16 keys each.
    static_assert(kThreads == 4 * kRows && kKeys == 4 * 16, "4 threads a row, 16 keys each");
    {
      const int r = threadIdx.x / 4, part = threadIdx.x % 4;
      const int pos = pos0 + r;
      const int lo = shape.sliding_window > 0 ? pos - shape.sliding_window + 1 : 0;
      float sc[16];
      float mx = -FLT_MAX;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int key = part * 16 + j, kp = kt + key;
        const bool valid = r < tile.rows && kp <= pos && kp >= lo;
        sc[j] = valid ? shape.scale * ss[r * s_stride + key] + slope * static_cast<float>(kp - pos) : -FLT_MAX;
        mx = fmaxf(mx, sc[j]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_old = row_m[r];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float p = sc[j] > -FLT_MAX ? expf(sc[j] - m_new) : 0.0f;
        sum += p;
        ps[r * p_stride + part * 16 + j] = __float2half_rn(p);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      __syncwarp();
      if (part == 0) {
        const float corr = expf(m_old - m_new);  // 1 while no key was visible yet
        row_c[r] = corr;
        row_l[r] = row_l[r] * corr + sum;
        row_m[r] = m_new;
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kRows * d; idx += kThreads) {
      const int r = idx / d, c = idx - r * d;
      os[r * L.df + c] *= row_c[r];
    }
    __syncthreads();

    // O += P V.
    for (int f = 0; f < o_frags; ++f) {
      float* o_tile = os + s_rb * 16 * L.df + (o_c0 + f) * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_tile, L.df, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKeys; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
        wmma::load_matrix_sync(a, ps + s_rb * 16 * p_stride + kk, p_stride);
        wmma::load_matrix_sync(b, vs + kk * L.dh + (o_c0 + f) * 16, L.dh);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_tile, acc, L.df, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < tile.rows * d4; idx += kThreads) {
    const int r = idx / d4, c = idx - r * d4;
    const float inv = 1.0f / row_l[r];
    const float* o = os + r * L.df + 4 * c;
    reinterpret_cast<float4*>(out + (tile.row_begin + r) * q_row + static_cast<int64_t>(h) * d)[c] =
        make_float4(o[0] * inv, o[1] * inv, o[2] * inv, o[3] * inv);
  }
}

}  // namespace

Status attention_mma_init() {
  const int bytes = static_cast<int>(layout_for(kMaxDim).bytes);
  KILN_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(attention_mma_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  KILN_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(attention_mma_kernel<__nv_bfloat16>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return Status::ok();
}

bool attention_mma_supported(int head_dim) { return head_dim > 0 && head_dim % 32 == 0 && head_dim <= kMaxDim; }

void launch_attention_mma(const float* q, const AttentionTile* tiles, int64_t num_tiles, StepTokens tokens,
                          const AttentionShape& shape, PagedKv cache, float* out, cudaStream_t stream) {
  if (num_tiles <= 0) return;
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(shape.num_heads));
  const size_t bytes = layout_for(shape.head_dim).bytes;
  if (cache.bf16) {
    attention_mma_kernel<__nv_bfloat16><<<grid, kThreads, bytes, stream>>>(q, tiles, tokens, shape, cache, out);
  } else {
    attention_mma_kernel<float><<<grid, kThreads, bytes, stream>>>(q, tiles, tokens, shape, cache, out);
  }
}

}  // namespace kiln::cuda
