// The prefill attention kernel on tensor cores (head_dim 32, 64, 96 or 128): one thread block of
// four warps per (tile of query rows of one sequence, head); each warp owns 16 rows of the tile
// (32 over a bf16 or e4m3 cache: two row fragments) and keeps everything about them in registers: its
// scores, its softmax state and its output accumulator, and with one fragment its Q fragments
// (with two, Q's fragments come from shared memory at every tile). Per tile of kKeys keys, each
// warp computes S = Q K^T with mma.sync m16n8k16 (fp32 accumulation), runs the online softmax on S
// in registers (the accumulator layout of S is the operand layout P needs, so P never leaves
// registers), and adds P V into its output, reading K through ldmatrix and V through
// ldmatrix.trans; with two fragments each K and V fragment loaded feeds both. K and V reach shared
// memory in one of two ways:
//   - a bf16 cache holds the operands as the products read them: cp.async copies each tile's rows
//     straight into one of two operand buffers while the warps compute on the other (one barrier
//     a tile; q and p rounded to bf16, relative error about 8e-3 against fp32);
//   - a float or e4m3 cache: cp.async copies the next tile's rows into a staging buffer while the
//     current tile is computed, and the block converts them to fp16 into the operand tile (two
//     barriers a tile; q, k, v, p rounded to fp16, relative error about 1e-3; e4m3 values are
//     fp16 values, exact).
// Causal masking, GQA, sliding window and ALiBi as in the other kernels; tiles that need neither
// mask nor bias (most of a long prompt's) fold the scale into the exponent. Blocks start longest
// tile first over all heads (the grid's x is the head, which varies fastest in launch order), so
// that the short tiles fill the end of the launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/attention/cuda_kv.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/cuda_vec.cuh"
#include "backends/cuda/gemm/cuda_mma.cuh"

namespace kiln::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 64;   // keys a shared-memory tile: eight 8-key score fragments a warp
constexpr int kPad = 8;     // elements of padding a shared row: rows 16 bytes apart mod 128 (no bank conflicts)
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kKeys % 16 == 0, "fragments of 16 keys");

// A cache of 16-bit elements is read as the operands; a float or e4m3 cache through fp16 operand
// tiles.
template <typename T>
constexpr bool kDirect = sizeof(T) == 2;
// Row fragments of 16 a warp: two over a 16- or 8-bit cache, so that every K and V fragment a
// warp loads feeds two products (Q is then read from shared memory); one over a float cache,
// whose staging buffers leave no room for Q beside two blocks an SM.
constexpr int fragments(int element_bytes) { return element_bytes <= 2 ? 2 : 1; }
template <typename T>
constexpr int kFragments = fragments(sizeof(T));

// One K and one V operand tile of 16-bit elements, padded rows.
__host__ __device__ constexpr size_t tile_bytes(int d) { return 2 * 2 * kKeys * static_cast<size_t>(d + kPad); }
// Direct: two operand tiles (one computed on, one filling). Float cache: one operand tile and the
// raw rows of the next tile. With two fragments a warp, then the tile's Q rows.
__host__ __device__ constexpr size_t shared_bytes(int d, int element_bytes, int fragments) {
  return (element_bytes == 2 ? 2 * tile_bytes(d) : tile_bytes(d) + 2 * static_cast<size_t>(kKeys) * d * element_bytes) +
         (fragments > 1 ? static_cast<size_t>(kWarps) * 16 * fragments * (d + kPad) * 2 : 0);
}

// 2^x in one instruction (relative error about 2^-22; -inf gives 0, subnormal results flush to 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <typename T, int D, typename O>
__global__ void __launch_bounds__(kThreads, 2) attention_mma_kernel(const float* q, const AttentionTile* tiles,
                                                                 int num_tiles, StepTokens tokens,
                                                                 AttentionShape shape, PagedKv cache, O* out) {
  kernel_prologue();
  constexpr int F = kFragments<T>;
  using H = std::conditional_t<kDirect<T>, T, __half>;  // the operands' type
  using Op = Operand<H>;
  constexpr int kLd = D + kPad;
  constexpr int kChunks = D / 16;     // 16-wide slices of head_dim: the k steps of S = Q K^T
  constexpr int kDimTiles = D / 8;    // 8-wide output fragments
  constexpr int kKeyTiles = kKeys / 8;
  constexpr int kTileElems = kKeys * kLd;
  constexpr int kWarpRows = 16 * F;
  constexpr int kR = 2 * F;           // rows a lane holds: fragment f's rows g and g + 8
  constexpr bool kQShared = F > 1;    // Q's fragments read from shared memory at every tile
  extern __shared__ __align__(128) unsigned char smem[];
  auto* operands = reinterpret_cast<H*>(smem);  // [buffer][K, V][kKeys][kLd]; one buffer unless direct
  auto* stage_k = reinterpret_cast<T*>(smem + tile_bytes(D));  // float cache: raw rows of the next tile
  T* stage_v = stage_k + kKeys * D;
  H* q_tile = reinterpret_cast<H*>(smem + shared_bytes(D, sizeof(T), 1));  // F > 1: [rows][kLd]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // the fragment row (and +8) and column pair of this lane
  const int mat = lane / 8;              // the 8x8 matrix whose row this lane names in ldmatrix
  const AttentionTile tile = tiles[num_tiles - 1 - static_cast<int>(blockIdx.y)];
  const int h = blockIdx.x;
  const int kv_head = h / (shape.num_heads / shape.num_kv_heads);
  const int64_t q_row = static_cast<int64_t>(shape.num_heads) * D;
  const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * D;
  const int32_t* table = cache.tables + static_cast<int64_t>(tile.seq) * cache.table_stride;
  const int pos0 = tokens.positions[tile.row_begin];
  const float slope = shape.alibi_slopes != nullptr ? shape.alibi_slopes[h] : 0.0f;

  // This lane's rows: row i = 2f + e is row g + 8e of the warp's fragment f, at position
  // pos_g + offset(i); a row is live if it is one of the tile's.
  const int row_g = warp * kWarpRows + g;
  const int pos_g = pos0 + row_g;
  auto offset = [](int i) { return 16 * (i / 2) + 8 * (i % 2); };
  const int kv_hi = pos0 + tile.rows - 1;

  // Q rounded to the operand type (zero past the tile's rows): as A fragments in registers (one
  // fragment a warp), or in shared memory, each warp writing its own rows.
  uint32_t qa[kQShared ? 1 : kChunks][4];
  if constexpr (kQShared) {
    constexpr int kD4 = D / 4;
    for (int idx = lane; idx < kWarpRows * kD4; idx += 32) {
      const int r = warp * kWarpRows + idx / kD4, c = idx % kD4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < tile.rows) x = *reinterpret_cast<const float4*>(q + (tile.row_begin + r) * q_row + h * D + 4 * c);
      *reinterpret_cast<uint2*>(q_tile + r * kLd + 4 * c) = make_uint2(Op::pack(x.x, x.y), Op::pack(x.z, x.w));
    }
    __syncwarp();
  } else {
    const float* qr_a = q + (tile.row_begin + row_g) * q_row + static_cast<int64_t>(h) * D;
    const float* qr_b = qr_a + 8 * q_row;
    const bool live_a = row_g < tile.rows, live_b = row_g + 8 < tile.rows;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int col = c * 16 + 2 * t;
      const float2 zero = make_float2(0.f, 0.f);
      const float2 a0 = live_a ? *reinterpret_cast<const float2*>(qr_a + col) : zero;
      const float2 a1 = live_b ? *reinterpret_cast<const float2*>(qr_b + col) : zero;
      const float2 a2 = live_a ? *reinterpret_cast<const float2*>(qr_a + col + 8) : zero;
      const float2 a3 = live_b ? *reinterpret_cast<const float2*>(qr_b + col + 8) : zero;
      qa[c][0] = Op::pack(a0.x, a0.y);
      qa[c][1] = Op::pack(a1.x, a1.y);
      qa[c][2] = Op::pack(a2.x, a2.y);
      qa[c][3] = Op::pack(a3.x, a3.y);
    }
  }
  // ldmatrix rows of Q's A fragments: matrices 0-3 are rows 0-7 / 8-15 of dims 0-7, then of 8-15.
  const H* qrow = q_tile + (warp * kWarpRows + (mat & 1) * 8 + lane % 8) * kLd + (mat >> 1) * 8;

  float o[F][kDimTiles][4];
#pragma unroll
  for (int f = 0; f < F; ++f) {
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) o[f][n][0] = o[f][n][1] = o[f][n][2] = o[f][n][3] = 0.0f;
  }
  float m[kR], l[kR];  // running maxima (log2 units, scaled) and this lane's share of the row sums
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }

  const int kv_lo = shape.sliding_window > 0 ? max(0, pos0 - shape.sliding_window + 1) : 0;
  const int warp_first = pos0 + warp * kWarpRows, warp_last = warp_first + kWarpRows - 1;
  const float scale2 = shape.scale * kLog2e, slope2 = slope * kLog2e;
  // Tiles that need neither a mask nor a bias keep raw scores: the scale goes into the exponent.
  const bool plain_ok = slope2 == 0.0f && scale2 > 0.0f && shape.sliding_window <= 0;

  // Tile kt's rows, 16 bytes a copy (keys past kv_hi read as zero): straight into operand buffer
  // `buf` (direct), or raw into the staging buffers. Block sizes that are powers of two (all the
  // engines' caches) find a key's block by a shift rather than a division.
  constexpr int kPerCopy = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunksPerRow = D / kPerCopy;
  const int bs = cache.block_size;
  const int bs_shift = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;
  auto stage = [&](int kt, int buf) {
    for (int idx = threadIdx.x; idx < kKeys * kChunksPerRow; idx += kThreads) {
      const int j = idx / kChunksPerRow, e = (idx - j * kChunksPerRow) * kPerCopy;
      const int kp = kt + j;
      const bool valid = kp <= kv_hi;
      const int blk = bs_shift >= 0 ? kp >> bs_shift : kp / bs;
      const int64_t slot = valid ? static_cast<int64_t>(table[blk]) * bs + (kp - blk * bs) : 0;
      const int64_t off = slot * kv_row + static_cast<int64_t>(kv_head) * D;
      const T* src_k = static_cast<const T*>(cache.k) + off + e;
      const T* src_v = static_cast<const T*>(cache.v) + off + e;
      if constexpr (kDirect<T>) {
        H* ks = operands + 2 * buf * kTileElems;
        cp_async16(ks + j * kLd + e, src_k, valid);
        cp_async16(ks + kTileElems + j * kLd + e, src_v, valid);
      } else {
        cp_async16(stage_k + j * D + e, src_k, valid);
        cp_async16(stage_v + j * D + e, src_v, valid);
      }
    }
    cp_async_commit();
  };
  stage(kv_lo, 0);

  for (int kt = kv_lo, it = 0; kt <= kv_hi; kt += kKeys, ++it) {
    const H* ks;
    if constexpr (kDirect<T>) {
      cp_async_wait_all();
      __syncthreads();  // tile kt is in buffer it % 2; every warp is done with the other buffer
      if (kt + kKeys <= kv_hi) stage(kt + kKeys, (it + 1) % 2);  // filled while this tile is computed
      ks = operands + 2 * (it % 2) * kTileElems;
    } else {
      cp_async_wait_all();
      __syncthreads();  // tile kt is staged; every warp is done with the last fp16 tile
      constexpr int kD4 = D / 4;
      for (int idx = threadIdx.x; idx < kKeys * kD4; idx += kThreads) {
        const int j = idx / kD4, c = idx - j * kD4;
        const float4 kr = load4(stage_k + j * D + 4 * c);
        const float4 vr = load4(stage_v + j * D + 4 * c);
        *reinterpret_cast<uint2*>(operands + j * kLd + 4 * c) = make_uint2(Op::pack(kr.x, kr.y), Op::pack(kr.z, kr.w));
        *reinterpret_cast<uint2*>(operands + kTileElems + j * kLd + 4 * c) =
            make_uint2(Op::pack(vr.x, vr.y), Op::pack(vr.z, vr.w));
      }
      __syncthreads();  // the fp16 tile is ready and the staging buffers are free
      if (kt + kKeys <= kv_hi) stage(kt + kKeys, 0);  // copied in while this tile is computed
      ks = operands;
    }
    const H* vs = ks + kTileElems;

    // A warp whose rows see none of this tile's keys (all in their future, or all behind their
    // window) has nothing to add.
    const bool causal_skip = kt > warp_last;
    const bool window_skip = shape.sliding_window > 0 && kt + kKeys - 1 < warp_first - shape.sliding_window + 1;
    if (causal_skip || window_skip) continue;

    // S = Q K^T: K rows [key][dim] are the column-major B operand as stored. One ldmatrix gives
    // two key tiles' fragments, which every row fragment of the warp uses: matrices 0 and 1 are
    // keys 8j + 0..7 of dims 16c + 0..7 and + 8..15, matrices 2 and 3 the same dims of keys
    // 8(j + 1) + 0..7.
    float s[F][kKeyTiles][4];
#pragma unroll
    for (int f = 0; f < F; ++f) {
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j) s[f][j][0] = s[f][j][1] = s[f][j][2] = s[f][j][3] = 0.0f;
    }
    const H* krow = ks + ((mat >> 1) * 8 + lane % 8) * kLd + (mat & 1) * 8;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      uint32_t a[F][4];
#pragma unroll
      for (int f = 0; f < F; ++f) {
        if constexpr (kQShared) {
          ldmatrix_x4(a[f], qrow + f * 16 * kLd + c * 16);
        } else {
          a[f][0] = qa[c][0];
          a[f][1] = qa[c][1];
          a[f][2] = qa[c][2];
          a[f][3] = qa[c][3];
        }
      }
#pragma unroll
      for (int j = 0; j < kKeyTiles; j += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, krow + j * 8 * kLd + c * 16);
#pragma unroll
        for (int f = 0; f < F; ++f) {
          Op::mma(s[f][j], a[f], b[0], b[1]);
          Op::mma(s[f][j + 1], a[f], b[2], b[3]);
        }
      }
    }

    // The online softmax of the lane's rows, in log2 units. Row i's scores are s[i / 2][j][2 (i %
    // 2) + e]; the four lanes of a row (t = 0..3) hold its kKeys scores between them. A tile wholly
    // in the past of the warp's rows, without a window or a bias, needs no mask: its scores stay
    // raw and `mul` scales them inside the exponent. Other tiles get scale, bias and mask here
    // (masked scores -inf).
    const bool plain = plain_ok && kt + kKeys - 1 <= warp_first;
    const float mul = plain ? scale2 : 1.0f;
    float mx[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) mx[i] = -INFINITY;
    if (plain) {
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
        for (int i = 0; i < kR; ++i) {
          mx[i] = fmaxf(mx[i], fmaxf(s[i / 2][j][2 * (i % 2)], s[i / 2][j][2 * (i % 2) + 1]));
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int kp = kt + j * 8 + 2 * t + e;
#pragma unroll
          for (int i = 0; i < kR; ++i) {
            float& x = s[i / 2][j][2 * (i % 2) + e];
            const int pos = pos_g + offset(i);
            const bool ok = pos <= kv_hi && kp <= pos && (shape.sliding_window <= 0 || pos - kp < shape.sliding_window);
            x = ok ? scale2 * x + slope2 * static_cast<float>(kp - pos) : -INFINITY;
            mx[i] = fmaxf(mx[i], x);
          }
        }
      }
    }
    float base[kR];  // the exponent's offset: the new maximum, 0 while a row has seen no key
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      const float mn = fmaxf(m[i], mx[i] * mul);
      base[i] = mn == -INFINITY ? 0.0f : mn;
      const float corr = exp2_approx(m[i] - base[i]);  // 0 while no key was visible
      m[i] = mn;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[i / 2][j][2 * (i % 2) + e];
          x = exp2_approx(fmaf(x, mul, -base[i]));
          sum += x;
        }
      }
      l[i] = l[i] * corr + sum;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        o[i / 2][n][2 * (i % 2)] *= corr;
        o[i / 2][n][2 * (i % 2) + 1] *= corr;
      }
    }

    // O += P V, 16 keys at a time: the score fragments of keys 16c..16c+15 are P's A fragment.
#pragma unroll
    for (int c = 0; c < kKeys / 16; ++c) {
      uint32_t pa[F][4];
#pragma unroll
      for (int f = 0; f < F; ++f) {
        pa[f][0] = Op::pack(s[f][2 * c][0], s[f][2 * c][1]);
        pa[f][1] = Op::pack(s[f][2 * c][2], s[f][2 * c][3]);
        pa[f][2] = Op::pack(s[f][2 * c + 1][0], s[f][2 * c + 1][1]);
        pa[f][3] = Op::pack(s[f][2 * c + 1][2], s[f][2 * c + 1][3]);
      }
      // ldmatrix rows: matrices 0 and 1 are keys 16c + 0..7 and + 8..15 of dims 16n + 0..7,
      // matrices 2 and 3 the same keys of dims 16n + 8..15.
      const H* vrow = vs + (c * 16 + (mat & 1) * 8 + lane % 8) * kLd + (mat >> 1) * 8;
#pragma unroll
      for (int n = 0; n < kDimTiles / 2; ++n) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vrow + n * 16);
#pragma unroll
        for (int f = 0; f < F; ++f) {
          Op::mma(o[f][2 * n], pa[f], b[0], b[1]);
          Op::mma(o[f][2 * n + 1], pa[f], b[2], b[3]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kR; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    const int row = row_g + offset(i);
    if (row >= tile.rows) continue;
    const float inv = 1.0f / l[i];
    O* dst = out + (tile.row_begin + row) * q_row + static_cast<int64_t>(h) * D + 2 * t;
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
      store2(dst + n * 8, o[i / 2][n][2 * (i % 2)] * inv, o[i / 2][n][2 * (i % 2) + 1] * inv);
    }
  }
}

template <typename O>
using MmaKernel = void (*)(const float*, const AttentionTile*, int, StepTokens, AttentionShape, PagedKv, O*);

// The kernel for head size d (32, 64, 96 or 128; 16-bit outputs: 64 or 128), cache elements T
// and output elements O.
template <typename T, typename O>
MmaKernel<O> kernel_for(int d) {
  if constexpr (std::is_same_v<O, float>) {
    if (d == 32) return attention_mma_kernel<T, 32, O>;
    if (d == 96) return attention_mma_kernel<T, 96, O>;
  }
  return d == 64 ? attention_mma_kernel<T, 64, O> : attention_mma_kernel<T, 128, O>;
}

template <typename T, typename O>
void launch_for(int d, dim3 grid, size_t bytes, cudaStream_t stream, const float* q, const AttentionTile* tiles,
                int num_tiles, StepTokens tokens, const AttentionShape& shape, PagedKv cache, void* out) {
  launch(kernel_for<T, O>(d), grid, kThreads, bytes, stream, q, tiles, num_tiles, tokens, shape, cache,
         static_cast<O*>(out));
}

template <typename T, typename O>
Status allow_shared() {
  for (int d : {32, 64, 96, 128}) {
    if (!std::is_same_v<O, float> && !attention_16_out_supported(d)) continue;
    const int bytes = static_cast<int>(shared_bytes(d, sizeof(T), kFragments<T>));
    KILN_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel_for<T, O>(d)),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
  return Status::ok();
}

// allow_shared for cache elements T and every output type.
template <typename T>
Status allow_shared_outputs() {
  KILN_RETURN_IF_ERROR((allow_shared<T, float>()));
  KILN_RETURN_IF_ERROR((allow_shared<T, __half>()));
  return allow_shared<T, __nv_bfloat16>();
}

}  // namespace

Status attention_mma_init() {
  KILN_RETURN_IF_ERROR(allow_shared_outputs<float>());
  KILN_RETURN_IF_ERROR(allow_shared_outputs<__nv_bfloat16>());
  return allow_shared_outputs<__nv_fp8_e4m3>();
}

bool attention_mma_supported(int head_dim) { return head_dim > 0 && head_dim % 32 == 0 && head_dim <= 128; }

int attention_mma_tile_rows(KvCacheDtype element) {
  return kWarps * 16 * fragments(static_cast<int>(runtime::kv_cache_dtype_bytes(element)));
}

void launch_attention_mma(const float* q, const AttentionTile* tiles, int64_t num_tiles, StepTokens tokens,
                          const AttentionShape& shape, PagedKv cache, void* out, ActivationType out_type,
                          cudaStream_t stream) {
  if (num_tiles <= 0) return;
  const dim3 grid(static_cast<unsigned>(shape.num_heads), static_cast<unsigned>(num_tiles));
  const int element_bytes = static_cast<int>(runtime::kv_cache_dtype_bytes(cache.element));
  const size_t bytes = shared_bytes(shape.head_dim, element_bytes, fragments(element_bytes));
  const auto n = static_cast<int>(num_tiles);
  const int d = shape.head_dim;
  auto go = [&](auto cache_element) {
    using T = decltype(cache_element);
    switch (out_type) {
      case ActivationType::kF32:
        launch_for<T, float>(d, grid, bytes, stream, q, tiles, n, tokens, shape, cache, out);
        break;
      case ActivationType::kF16:
        launch_for<T, __half>(d, grid, bytes, stream, q, tiles, n, tokens, shape, cache, out);
        break;
      case ActivationType::kBF16:
        launch_for<T, __nv_bfloat16>(d, grid, bytes, stream, q, tiles, n, tokens, shape, cache, out);
        break;
    }
  };
  with_kv_element(cache.element, go);
}

}  // namespace kiln::cuda
