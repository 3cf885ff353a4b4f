#include "backends/cuda/layers/cuda_rope.h"

#include "backends/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 128;

// Rotates token i of one tensor (x, y: [t, num_heads * head_dim]) with cos_sin: [2, half].
__device__ void rotate_token(const float* x, float* y, int64_t i, int64_t num_heads, int64_t head_dim,
                             int64_t rotary_dim, const float* cos_sin) {
  const int64_t half = rotary_dim / 2;
  const int64_t row = num_heads * head_dim;
  const float* in = x + i * row;
  float* out = y + i * row;
  for (int64_t p = threadIdx.x; p < num_heads * half; p += kThreads) {
    const int64_t h = p / half, j = p - h * half;
    const float x1 = in[h * head_dim + j];
    const float x2 = in[h * head_dim + j + half];
    const float c = cos_sin[j], s = cos_sin[half + j];
    // Separate roundings, as the CPU computes it (no fused multiply-add).
    out[h * head_dim + j] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
    out[h * head_dim + j + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
  if (out != in) {
    const int64_t pass = head_dim - rotary_dim;
    for (int64_t p = threadIdx.x; p < num_heads * pass; p += kThreads) {
      const int64_t h = p / pass, d = rotary_dim + p - h * pass;
      out[h * head_dim + d] = in[h * head_dim + d];
    }
  }
}

// One block per token. cos and sin depend on the token and the frequency only, so they are
// evaluated once into shared memory ([2, half]) and applied to every head of both tensors.
__global__ void rope_kernel(RopeTensor a, RopeTensor b, int64_t head_dim, int64_t rotary_dim,
                            const int32_t* positions, const float* inv_freq, const int32_t* token_seq) {
  kernel_prologue();
  extern __shared__ float cos_sin[];
  const int64_t i = blockIdx.x;
  const int64_t half = rotary_dim / 2;
  const float* inv = inv_freq + (token_seq != nullptr ? token_seq[i] * half : 0);
  const auto pos = static_cast<float>(positions[i]);
  for (int64_t j = threadIdx.x; j < half; j += kThreads) {
    double s, c;
    sincos(static_cast<double>(pos * inv[j]), &s, &c);
    cos_sin[j] = static_cast<float>(c);
    cos_sin[half + j] = static_cast<float>(s);
  }
  __syncthreads();
  rotate_token(a.x, a.y, i, a.num_heads, head_dim, rotary_dim, cos_sin);
  if (b.x != nullptr) rotate_token(b.x, b.y, i, b.num_heads, head_dim, rotary_dim, cos_sin);
}

}  // namespace

void launch_rope_pair(RopeTensor a, RopeTensor b, int64_t t, int64_t head_dim, int64_t rotary_dim,
                      const int32_t* positions, const float* inv_freq, const int32_t* token_seq, cudaStream_t stream) {
  if (t <= 0) return;
  const size_t smem = static_cast<size_t>(rotary_dim) * sizeof(float);
  launch(rope_kernel, static_cast<unsigned>(t), kThreads, smem, stream, a, b, head_dim, rotary_dim, positions,
         inv_freq, token_seq);
}

void launch_rope(const float* x, int64_t t, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
                 const int32_t* positions, const float* inv_freq, const int32_t* token_seq, float* y,
                 cudaStream_t stream) {
  launch_rope_pair({x, y, num_heads}, {nullptr, nullptr, 0}, t, head_dim, rotary_dim, positions, inv_freq, token_seq,
                   stream);
}

}  // namespace kiln::cuda
