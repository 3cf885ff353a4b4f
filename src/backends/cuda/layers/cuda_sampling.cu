#include "backends/cuda/layers/cuda_sampling.h"

#include <cfloat>
#include <climits>
#include <cub/block/block_scan.cuh>

#include "backends/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

using runtime::device_sampling_exp;
using runtime::device_sampling_key;
using runtime::device_sampling_mass;
using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

struct Shared {
  cub::BlockScan<u64, kThreads>::TempStorage scan;
  u64 hist[256];
  u64 warp_sum[kWarps];
  float warp_max[kWarps];
  int warp_arg[kWarps];
  u64 broadcast;
  uint32_t digit;
};

// Sum over the block; every thread gets it.
__device__ u64 block_sum(u64 v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  __syncthreads();  // warp_sum may still be read from an earlier call
  if (threadIdx.x % 32 == 0) sh.warp_sum[threadIdx.x / 32] = v;
  __syncthreads();
  u64 total = 0;
  for (int w = 0; w < kWarps; ++w) total += sh.warp_sum[w];
  return total;
}

// The larger of (v, i) and (ov, oi), ties to the lower index.
__device__ __forceinline__ void take_larger(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

// The largest value of row and its first index; every thread gets them.
__device__ void block_argmax(const float* row, int vocab, Shared& sh, float& m, int& arg) {
  float v = -__int_as_float(0x7f800000);  // -inf
  int i = INT_MAX;
  for (int j = threadIdx.x; j < vocab; j += kThreads) take_larger(v, i, row[j], j);
  for (int o = 16; o > 0; o >>= 1) take_larger(v, i, __shfl_xor_sync(kFull, v, o), __shfl_xor_sync(kFull, i, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    sh.warp_max[threadIdx.x / 32] = v;
    sh.warp_arg[threadIdx.x / 32] = i;
  }
  __syncthreads();
  m = sh.warp_max[0];
  arg = sh.warp_arg[0];
  for (int w = 1; w < kWarps; ++w) take_larger(m, arg, sh.warp_max[w], sh.warp_arg[w]);
}

// What radix selection and tie keeping rank a value by and count it as: top-k ranks logits and
// counts tokens, top-p ranks weights and sums their masses.
struct ByCount {
  __device__ uint32_t key(float x) const { return device_sampling_key(x); }
  __device__ u64 weight(float) const { return 1; }
};
struct ByMass {
  __device__ uint32_t key(float x) const { return device_sampling_key(x); }
  __device__ u64 weight(float x) const { return device_sampling_mass(x); }
};

// The largest key tau whose keys at or above it weigh at least `need`, digit by digit from the
// top; `need` becomes what the keys equal to tau must supply (at least 1).
template <typename Rank>
__device__ uint32_t radix_select(const float* row, int vocab, u64& need, Rank rank, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    // A thread's values often share a digit (a row's weights crowd into a few exponents): it adds
    // each run of equal digits with one atomic, which keeps the shared-memory atomics from queueing.
    uint32_t run_digit = 0;
    u64 run = 0;
    for (int j = threadIdx.x; j < vocab; j += kThreads) {
      const uint32_t key = rank.key(row[j]);
      const u64 w = rank.weight(row[j]);
      if ((key & mask) != prefix || w == 0) continue;
      const uint32_t digit = (key >> shift) & 255u;
      if (digit != run_digit && run != 0) {
        atomicAdd(&sh.hist[run_digit], run);
        run = 0;
      }
      run_digit = digit;
      run += w;
    }
    if (run != 0) atomicAdd(&sh.hist[run_digit], run);
    __syncthreads();
    if (threadIdx.x < 32) {
      // Warp 0 finds the digit: lane l sums digits 255 - 8 l down to 248 - 8 l, a scan over the
      // lanes finds the lane where the weight from the top reaches `need`, and it walks its 8.
      const int lane = static_cast<int>(threadIdx.x);
      u64 mine = 0;
      for (int d = 255 - 8 * lane; d > 247 - 8 * lane; --d) mine += sh.hist[d];
      u64 inclusive = mine;
      for (int o = 1; o < 32; o <<= 1) {
        const u64 up = __shfl_up_sync(kFull, inclusive, o);
        if (lane >= o) inclusive += up;
      }
      const unsigned reached = __ballot_sync(kFull, inclusive >= need);
      const int first = reached == 0 ? 31 : __ffs(reached) - 1;  // none: the last lane (the rest is 0's)
      if (lane == first) {
        u64 before = inclusive - mine;
        int d = 255 - 8 * lane;
        for (; d > 248 - 8 * lane && before + sh.hist[d] < need; --d) before += sh.hist[d];
        sh.digit = static_cast<uint32_t>(d);
        sh.broadcast = need - before;
      }
    }
    __syncthreads();
    prefix |= sh.digit << shift;
    mask |= 255u << shift;
    need = sh.broadcast;
  }
  return prefix;
}

// Each thread's run of ids: [begin, end).
__device__ __forceinline__ void own_run(int vocab, int& begin, int& end) {
  const int per = (vocab + kThreads - 1) / kThreads;
  begin = min(vocab, static_cast<int>(threadIdx.x) * per);
  end = min(vocab, begin + per);
}

// Keeps every value whose key is above tau and, in id order, those at tau while what the kept
// ones before weigh is below `need`; the rest become `dropped`.
template <typename Rank>
__device__ void keep_first_ties(float* row, int vocab, uint32_t tau, u64 need, float dropped, Rank rank, Shared& sh) {
  int begin, end;
  own_run(vocab, begin, end);
  u64 mine = 0;
  for (int j = begin; j < end; ++j) mine += rank.key(row[j]) == tau ? rank.weight(row[j]) : 0;
  u64 before = 0;
  __syncthreads();
  cub::BlockScan<u64, kThreads>(sh.scan).ExclusiveSum(mine, before);
  for (int j = begin; j < end; ++j) {
    const uint32_t key = rank.key(row[j]);
    if (key > tau) continue;
    if (key == tau && before < need) {
      before += rank.weight(row[j]);
      continue;
    }
    row[j] = dropped;
  }
  __syncthreads();
}

// One block a row; logits: [rows, vocab]; ids: [rows].
__global__ void __launch_bounds__(kThreads) sample_rows_kernel(float* logits, int vocab, DeviceSamplingRows s,
                                                               int32_t* ids) {
  kernel_prologue();
  __shared__ Shared sh;
  const runtime::RowSampling p = s.rows[blockIdx.x];
  float* a = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const float inf = __int_as_float(0x7f800000);

  // Step 1. Bias and penalty tokens are distinct within each list; the two lists apply in turn.
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    if (isnan(a[j]) || !runtime::device_sampling_allowed(p, s.mask_words, s.mask_stride, j)) a[j] = -inf;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < p.bias_count; j += kThreads) {
    const int32_t t = s.bias_tokens[p.bias_begin + j];
    if (t >= 0 && t < vocab) a[t] += s.bias_values[p.bias_begin + j];
  }
  __syncthreads();
  for (int j = threadIdx.x; j < p.penalty_count; j += kThreads) {
    const int32_t t = s.penalty_tokens[p.penalty_begin + j];
    if (t < 0 || t >= vocab) continue;
    float x = a[t];
    if (p.repetition_penalty != 1.0f) x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    const int32_t c = s.penalty_counts[p.penalty_begin + j];
    if (c > 0) x -= fmaf(p.frequency_penalty, static_cast<float>(c), p.presence_penalty);
    a[t] = x;
  }
  __syncthreads();

  // Step 2.
  float m;
  int argmax;
  block_argmax(a, vocab, sh, m, argmax);
  if (m == -inf || p.temperature == 0.0f) {
    if (threadIdx.x == 0) ids[blockIdx.x] = m == -inf ? -1 : argmax;
    return;
  }
  if (m == inf) {
    for (int j = threadIdx.x; j < vocab; j += kThreads) a[j] = a[j] == inf ? 0.0f : -inf;
    m = 0.0f;
    __syncthreads();
  }

  // Step 3.
  if (p.top_k > 0 && p.top_k < vocab) {
    u64 finite = 0;
    for (int j = threadIdx.x; j < vocab; j += kThreads) finite += a[j] > -inf ? 1 : 0;
    finite = block_sum(finite, sh);
    if (static_cast<u64>(p.top_k) < finite) {
      u64 need = static_cast<u64>(p.top_k);
      const uint32_t tau = radix_select(a, vocab, need, ByCount{}, sh);
      keep_first_ties(a, vocab, tau, need, -inf, ByCount{}, sh);
    }
  }

  // Step 4.
  const float scale = fminf(1.0f / p.temperature, FLT_MAX);
  u64 total = 0;
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    const float w = a[j] == -inf ? 0.0f : device_sampling_exp((a[j] - m) * scale);
    a[j] = w;
    total += device_sampling_mass(w);
  }
  total = block_sum(total, sh);  // its barriers also publish the weights

  // Step 5.
  if (p.min_p > 0.0f) {
    for (int j = threadIdx.x; j < vocab; j += kThreads) {
      if (a[j] < p.min_p) a[j] = 0.0f;
    }
    __syncthreads();
  }
  if (p.top_p < 1.0f) {
    const auto target = static_cast<u64>(ceil(static_cast<double>(p.top_p) * static_cast<double>(total)));
    u64 left = 0;
    for (int j = threadIdx.x; j < vocab; j += kThreads) left += device_sampling_mass(a[j]);
    if (block_sum(left, sh) >= target) {
      u64 need = target;
      const uint32_t tau = radix_select(a, vocab, need, ByMass{}, sh);
      keep_first_ties(a, vocab, tau, need, 0.0f, ByMass{}, sh);
    }
  }

  // Step 6: the thread whose run holds the draw walks it.
  int begin, end;
  own_run(vocab, begin, end);
  u64 mine = 0;
  for (int j = begin; j < end; ++j) mine += device_sampling_mass(a[j]);
  u64 before = 0, kept = 0;
  __syncthreads();
  cub::BlockScan<u64, kThreads>(sh.scan).ExclusiveSum(mine, before, kept);
  if (kept == 0) {  // not reached: the largest weight is 1
    if (threadIdx.x == 0) ids[blockIdx.x] = argmax;
    return;
  }
  const u64 r = min(static_cast<u64>(p.uniform * static_cast<double>(kept)), kept - 1);
  if (threadIdx.x == 0) ids[blockIdx.x] = argmax;  // overwritten below; only a broken invariant leaves it
  __syncthreads();
  if (before <= r && r < before + mine) {
    u64 cumulative = before;
    for (int j = begin; j < end; ++j) {
      cumulative += device_sampling_mass(a[j]);
      if (cumulative > r) {
        ids[blockIdx.x] = j;
        break;
      }
    }
  }
}

}  // namespace

void launch_sample_rows(float* logits, int64_t num_rows, int64_t vocab, const DeviceSamplingRows& sampling,
                        int32_t* ids, cudaStream_t stream) {
  if (num_rows == 0) return;
  launch(sample_rows_kernel, dim3(static_cast<unsigned>(num_rows)), dim3(kThreads), 0, stream, logits,
         static_cast<int>(vocab), sampling, ids);
}

}  // namespace kiln::cuda
