#include "backends/cuda/layers/cuda_qkv.h"

#include <algorithm>

#include "backends/cuda/attention/cuda_kv.cuh"
#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/cuda_vec.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHalf = 256;        // rotary_dim <= 512
constexpr int64_t kTargetBlocks = 4096;  // blocks of a launch: a few waves on a Hopper GPU

// Block (i, b): token i, head groups b, b + gridDim.y, ... of the [q | k | v] head list (a group
// is as many heads as kThreads threads cover at one thread a pair of dimensions); cos and sin of
// the token are evaluated once per block. Thread p of a rotated head (q, k) writes the turned pair
// (p, p + half) when p < half, else two passed-through dimensions (2 half + 2 (p - half) and the
// next); thread p of a value head copies dimensions 2p and 2p + 1.
template <typename In, typename T>
__global__ void __launch_bounds__(kThreads) qkv_rope_store_kernel(const In* __restrict__ qkv, QkvShape shape,
                                                                  StepTokens tokens, const float* inv_freq,
                                                                  const int32_t* token_seq, float* __restrict__ q,
                                                                  float* __restrict__ k, float* __restrict__ v,
                                                                  PagedKv cache) {
  kernel_prologue();
  __shared__ float cos_sin[2 * kMaxHalf];
  const int64_t i = blockIdx.x;
  const int d_head = shape.head_dim, half = shape.rotary_dim / 2, pairs = d_head / 2;
  const int heads_per_group = kThreads / pairs;
  const int total_heads = shape.num_heads + 2 * shape.num_kv_heads;
  const int groups = (total_heads + heads_per_group - 1) / heads_per_group;
  const int pos = tokens.positions[i];
  const float* inv = inv_freq + (token_seq != nullptr ? static_cast<int64_t>(token_seq[i]) * half : 0);
  const auto fpos = static_cast<float>(pos);
  for (int j = threadIdx.x; j < half; j += kThreads) {
    double s, c;
    sincos(static_cast<double>(fpos * inv[j]), &s, &c);
    cos_sin[j] = static_cast<float>(c);
    cos_sin[half + j] = static_cast<float>(s);
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) >= heads_per_group * pairs) return;
  const int p = static_cast<int>(threadIdx.x) % pairs;
  const int64_t q_row = static_cast<int64_t>(shape.num_heads) * d_head;
  const int64_t kv_row = static_cast<int64_t>(shape.num_kv_heads) * d_head;
  const int32_t* table = cache.tables + static_cast<int64_t>(tokens.token_seq[i]) * cache.table_stride;
  const int64_t dst = (static_cast<int64_t>(table[pos / cache.block_size]) * cache.block_size + pos % cache.block_size) *
                      kv_row;
  const float c = p < half ? cos_sin[p] : 0.0f, s = p < half ? cos_sin[half + p] : 0.0f;
  const int pass = 2 * half + 2 * (p - half);  // a rotated head's passed-through pair, when p >= half
#pragma unroll 4
  for (int g = blockIdx.y; g < groups; g += gridDim.y) {
    const int head = g * heads_per_group + static_cast<int>(threadIdx.x) / pairs;
    if (head >= total_heads) break;
    const In* in = qkv + i * (q_row + 2 * kv_row) + static_cast<int64_t>(head) * d_head;
    float* out = nullptr;
    T* slot = nullptr;
    bool rotate = true;
    if (head < shape.num_heads) {
      out = q + i * q_row + static_cast<int64_t>(head) * d_head;
    } else if (head < shape.num_heads + shape.num_kv_heads) {
      const int64_t at = static_cast<int64_t>(head - shape.num_heads) * d_head;
      out = k != nullptr ? k + i * kv_row + at : nullptr;
      slot = static_cast<T*>(cache.k) + dst + at;
    } else {
      const int64_t at = static_cast<int64_t>(head - shape.num_heads - shape.num_kv_heads) * d_head;
      out = v != nullptr ? v + i * kv_row + at : nullptr;
      slot = static_cast<T*>(cache.v) + dst + at;
      rotate = false;
    }
    if (rotate && p < half) {
      const float x1 = load1(in + p), x2 = load1(in + p + half);
      // Separate roundings, as the CPU computes it (no fused multiply-add).
      const float y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
      const float y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
      if (out != nullptr) {
        out[p] = y1;
        out[p + half] = y2;
      }
      if (slot != nullptr) {
        store1(slot + p, y1);
        store1(slot + p + half, y2);
      }
    } else {
      const int d = rotate ? pass : 2 * p;
      const float2 x = load2(in + d);
      if (out != nullptr) *reinterpret_cast<float2*>(out + d) = x;
      if (slot != nullptr) {
        store1(slot + d, x.x);
        store1(slot + d + 1, x.y);
      }
    }
  }
}

}  // namespace

void launch_qkv_rope_store(const void* qkv, ActivationType qkv_type, int64_t t, const QkvShape& shape,
                           StepTokens tokens, const float* inv_freq, const int32_t* token_seq, float* q, float* k,
                           float* v, PagedKv cache, cudaStream_t stream) {
  if (t <= 0) return;
  const int heads_per_group = kThreads / (shape.head_dim / 2);
  const int total_heads = shape.num_heads + 2 * shape.num_kv_heads;
  const int64_t groups = (total_heads + heads_per_group - 1) / heads_per_group;
  // A group per block for small steps (decode: the heads spread over the GPU); for long ones,
  // enough blocks for a few waves, each taking several groups with one evaluation of cos and sin.
  const int64_t blocks_per_token = std::clamp<int64_t>(kTargetBlocks / t, 1, groups);
  const dim3 grid(static_cast<unsigned>(t), static_cast<unsigned>(blocks_per_token));
  auto go = [&](auto input_element) {
    using In = decltype(input_element);
    const auto* in = static_cast<const In*>(qkv);
    with_kv_element(cache.element, [&](auto element) {
      using T = decltype(element);
      launch(qkv_rope_store_kernel<In, T>, grid, kThreads, 0, stream, in, shape, tokens, inv_freq, token_seq, q, k, v,
             cache);
    });
  };
  switch (qkv_type) {
    case ActivationType::kF32:
      go(float{});
      break;
    case ActivationType::kF16:
      go(__half{});
      break;
    case ActivationType::kBF16:
      go(__nv_bfloat16{});
      break;
  }
}

bool qkv_rope_store_supported(const QkvShape& shape) {
  return shape.head_dim > 0 && shape.head_dim <= kThreads && shape.head_dim % 2 == 0 && shape.rotary_dim % 2 == 0 &&
         shape.rotary_dim <= shape.head_dim && shape.rotary_dim / 2 <= kMaxHalf;
}

}  // namespace kiln::cuda
