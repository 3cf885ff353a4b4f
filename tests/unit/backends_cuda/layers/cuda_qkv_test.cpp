// The fused split + rope + cache store against the CPU's rope and a host-side store: rotated
// queries, and the cache slots of every token holding its rotated key and its value, for full
// and partial rotary dimensions, GQA, and per-sequence (dynamic NTK) frequency tables; q/k/v
// handed over in fp16 or bf16 give what their widened values give.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backends/cpu/layers/rope.h"
#include "backends/cuda/layers/cuda_qkv.h"
#include "base/half.h"
#include "ir/position_encoding.h"
#include "unit/backends_cuda/cuda_test_support.h"

namespace kiln::cuda {
namespace {

using testing::DeviceArray;
using testing::random_floats;
using testing::rel_error;

struct QkvCase {
  int heads, kv_heads, dim, rot;
  bool dynamic;
};

void check_qkv(const QkvCase& c, int64_t t = 37) {
  // Two sequences: 20 tokens from position 3, then t - 20 tokens from position 0. Long steps
  // take several head groups per block.
  const int block_size = 4, stride = static_cast<int>((t + 3) / block_size + 1), num_blocks = 2 * stride;
  std::vector<int32_t> positions(static_cast<size_t>(t)), token_seq(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    token_seq[static_cast<size_t>(i)] = i < 20 ? 0 : 1;
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(i < 20 ? 3 + i : i - 20);
  }
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(40));
  std::vector<int32_t> tables(2 * stride);
  std::copy(pool.begin(), pool.begin() + 2 * stride, tables.begin());

  const int64_t q_row = int64_t{c.heads} * c.dim, kv_row = int64_t{c.kv_heads} * c.dim, row = q_row + 2 * kv_row;
  const auto qkv = random_floats(static_cast<size_t>(t * row), 41, -3.0f, 3.0f);
  std::vector<float> q(static_cast<size_t>(t * q_row)), k(static_cast<size_t>(t * kv_row)), v(k.size());
  for (int64_t i = 0; i < t; ++i) {
    const float* r = qkv.data() + i * row;
    std::copy(r, r + q_row, q.begin() + i * q_row);
    std::copy(r + q_row, r + q_row + kv_row, k.begin() + i * kv_row);
    std::copy(r + q_row + kv_row, r + row, v.begin() + i * kv_row);
  }
  ir::RopeParams p;
  p.type = c.dynamic ? "dynamic" : "default";
  p.theta = 10000.0;
  p.factor = 2.0;
  p.max_position = 8;
  const auto inv_a = ir::rope_inv_freq(p, c.rot, c.dynamic ? 23 : 0);
  const auto inv_b = ir::rope_inv_freq(p, c.rot, c.dynamic ? 17 : 0);
  std::vector<float> want_q(q.size()), want_k(k.size());
  cpu::rope(q.data(), 20, c.heads, c.dim, c.rot, positions.data(), inv_a.data(), want_q.data());
  cpu::rope(q.data() + 20 * q_row, t - 20, c.heads, c.dim, c.rot, positions.data() + 20, inv_b.data(),
            want_q.data() + 20 * q_row);
  cpu::rope(k.data(), 20, c.kv_heads, c.dim, c.rot, positions.data(), inv_a.data(), want_k.data());
  cpu::rope(k.data() + 20 * kv_row, t - 20, c.kv_heads, c.dim, c.rot, positions.data() + 20, inv_b.data(),
            want_k.data() + 20 * kv_row);
  const size_t layer = static_cast<size_t>(num_blocks * block_size * kv_row);
  auto cache_k = random_floats(layer, 42), cache_v = random_floats(layer, 43);
  DeviceArray<float> dk_cache(cache_k), dv_cache(cache_v);
  for (int64_t i = 0; i < t; ++i) {
    const int pos = positions[static_cast<size_t>(i)];
    const int64_t slot =
        (int64_t{tables[static_cast<size_t>(token_seq[static_cast<size_t>(i)] * stride + pos / block_size)]} *
             block_size + pos % block_size) * kv_row;
    std::copy(want_k.begin() + i * kv_row, want_k.begin() + (i + 1) * kv_row, cache_k.begin() + slot);
    std::copy(v.begin() + i * kv_row, v.begin() + (i + 1) * kv_row, cache_v.begin() + slot);
  }

  std::vector<float> freqs = inv_a;
  if (c.dynamic) freqs.insert(freqs.end(), inv_b.begin(), inv_b.end());
  DeviceArray<float> dqkv(qkv), dinv(freqs), dq(q.size()), dk(k.size()), dv(v.size());
  DeviceArray<int32_t> dpos(positions), dseq(token_seq), dtables(tables);
  const QkvShape shape{c.heads, c.kv_heads, c.dim, c.rot};
  ASSERT_TRUE(qkv_rope_store_supported(shape));
  const PagedKv kv{dk_cache.get(), dv_cache.get(), block_size, dtables.get(), stride};
  launch_qkv_rope_store(dqkv.get(), ActivationType::kF32, t, shape, {dseq.get(), dpos.get()}, dinv.get(),
                        c.dynamic ? dseq.get() : nullptr, dq.get(), dk.get(), dv.get(), kv, nullptr);
  const std::string what = "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " dim " +
                           std::to_string(c.dim) + " rot " + std::to_string(c.rot) + (c.dynamic ? " dynamic" : "");
  EXPECT_LE(rel_error(dq.download(), want_q), 1e-6) << what;
  EXPECT_LE(rel_error(dk.download(), want_k), 1e-6) << what;
  EXPECT_EQ(dv.download(), v) << what;
  EXPECT_LE(rel_error(dk_cache.download(), cache_k), 1e-6) << "cache keys, " << what;
  EXPECT_EQ(dv_cache.download(), cache_v) << "cache values, " << what;
  // Without k and v outputs: the cache alone gets them.
  DeviceArray<float> dk_cache2(random_floats(layer, 42)), dv_cache2(random_floats(layer, 43)), dq2(q.size());
  const PagedKv kv2{dk_cache2.get(), dv_cache2.get(), block_size, dtables.get(), stride};
  launch_qkv_rope_store(dqkv.get(), ActivationType::kF32, t, shape, {dseq.get(), dpos.get()}, dinv.get(),
                        c.dynamic ? dseq.get() : nullptr, dq2.get(), nullptr, nullptr, kv2, nullptr);
  EXPECT_LE(rel_error(dq2.download(), want_q), 1e-6) << what;
  EXPECT_LE(rel_error(dk_cache2.download(), cache_k), 1e-6) << "cache keys without outputs, " << what;
  EXPECT_EQ(dv_cache2.download(), cache_v) << "cache values without outputs, " << what;
  // A bf16 or e4m3 cache gets the same keys and values, rounded to nearest even (e4m3 saturated
  // as the CPU's float_to_e4m3 does): the narrow cache's elements of the step's slots that are not
  // `round` of the fp32 cache's.
  const std::vector<float> got_k = dk_cache2.download(), got_v = dv_cache2.download();
  auto mismatches = [&](const auto& narrow_k, const auto& narrow_v, auto round) {
    int64_t count = 0;
    for (int64_t i = 0; i < t; ++i) {
      const int pos = positions[static_cast<size_t>(i)];
      const int64_t slot =
          (int64_t{tables[static_cast<size_t>(token_seq[static_cast<size_t>(i)] * stride + pos / block_size)]} *
               block_size + pos % block_size) * kv_row;
      for (int64_t e = slot; e < slot + kv_row; ++e) {
        const auto u = static_cast<size_t>(e);
        count += narrow_k[u] != round(got_k[u]);
        count += narrow_v[u] != round(got_v[u]);
      }
    }
    return count;
  };
  DeviceArray<uint16_t> dk16(layer), dv16(layer);
  const PagedKv kv16{dk16.get(), dv16.get(), block_size, dtables.get(), stride, KvCacheDtype::kBF16};
  launch_qkv_rope_store(dqkv.get(), ActivationType::kF32, t, shape, {dseq.get(), dpos.get()}, dinv.get(),
                        c.dynamic ? dseq.get() : nullptr, dq2.get(), nullptr, nullptr, kv16, nullptr);
  EXPECT_EQ(mismatches(dk16.download(), dv16.download(), float_to_bf16), 0) << "bf16 cache, " << what;
  DeviceArray<uint8_t> dk8(layer), dv8(layer);
  const PagedKv kv8{dk8.get(), dv8.get(), block_size, dtables.get(), stride, KvCacheDtype::kFP8};
  launch_qkv_rope_store(dqkv.get(), ActivationType::kF32, t, shape, {dseq.get(), dpos.get()}, dinv.get(),
                        c.dynamic ? dseq.get() : nullptr, dq2.get(), nullptr, nullptr, kv8, nullptr);
  EXPECT_EQ(mismatches(dk8.download(), dv8.download(), float_to_e4m3), 0) << "e4m3 cache, " << what;
  // q/k/v handed over in fp16 or bf16: the same outputs as fp32 inputs of the same values.
  for (const ActivationType type : {ActivationType::kF16, ActivationType::kBF16}) {
    const bool bf = type == ActivationType::kBF16;
    std::vector<uint16_t> qkv16(qkv.size());
    std::vector<float> widened(qkv.size());
    for (size_t e = 0; e < qkv.size(); ++e) {
      qkv16[e] = bf ? float_to_bf16(qkv[e]) : float_to_fp16(qkv[e]);
      widened[e] = bf ? bf16_to_float(qkv16[e]) : fp16_to_float(qkv16[e]);
    }
    DeviceArray<uint16_t> dqkv16(qkv16);
    DeviceArray<float> dwide(widened), dq_a(q.size()), dq_b(q.size()), dk_a(k.size()), dk_b(k.size()),
        dv_a(v.size()), dv_b(v.size());
    DeviceArray<float> ck_a(random_floats(layer, 42)), cv_a(random_floats(layer, 43));
    DeviceArray<float> ck_b(random_floats(layer, 42)), cv_b(random_floats(layer, 43));
    const PagedKv kv_a{ck_a.get(), cv_a.get(), block_size, dtables.get(), stride};
    const PagedKv kv_b{ck_b.get(), cv_b.get(), block_size, dtables.get(), stride};
    launch_qkv_rope_store(dqkv16.get(), type, t, shape, {dseq.get(), dpos.get()}, dinv.get(),
                          c.dynamic ? dseq.get() : nullptr, dq_a.get(), dk_a.get(), dv_a.get(), kv_a, nullptr);
    launch_qkv_rope_store(dwide.get(), ActivationType::kF32, t, shape, {dseq.get(), dpos.get()}, dinv.get(),
                          c.dynamic ? dseq.get() : nullptr, dq_b.get(), dk_b.get(), dv_b.get(), kv_b, nullptr);
    const std::string in = bf ? "bf16 input, " : "fp16 input, ";
    EXPECT_EQ(dq_a.download(), dq_b.download()) << in << what;
    EXPECT_EQ(dk_a.download(), dk_b.download()) << in << what;
    EXPECT_EQ(dv_a.download(), dv_b.download()) << in << what;
    EXPECT_EQ(ck_a.download(), ck_b.download()) << in << "cache keys, " << what;
    EXPECT_EQ(cv_a.download(), cv_b.download()) << in << "cache values, " << what;
    // The widened values are the fp32 ones within the input's rounding.
    EXPECT_LE(rel_error(dq_a.download(), want_q), bf ? 1e-2 : 1e-3) << in << what;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
}

TEST(CudaQkv, SplitRopeAndStoreMatchCpu) {
  KILN_REQUIRE_GPU();
  const QkvCase cases[] = {{4, 2, 24, 24, false}, {3, 3, 64, 32, false}, {8, 2, 128, 128, false},
                           {2, 1, 20, 12, true},  {5, 1, 256, 256, false}};
  for (const QkvCase& c : cases) check_qkv(c);
  check_qkv({8, 2, 128, 128, false}, 2100);
  check_qkv({4, 2, 20, 12, true}, 3000);
}

TEST(CudaQkv, ShapesItTakes) {
  EXPECT_TRUE(qkv_rope_store_supported({32, 32, 128, 128}));
  EXPECT_TRUE(qkv_rope_store_supported({4, 2, 20, 12}));
  EXPECT_FALSE(qkv_rope_store_supported({4, 2, 20, 13})) << "odd rotary_dim";
  EXPECT_FALSE(qkv_rope_store_supported({4, 2, 21, 12})) << "odd head_dim";
  EXPECT_FALSE(qkv_rope_store_supported({4, 2, 20, 24})) << "rotary_dim past head_dim";
  EXPECT_FALSE(qkv_rope_store_supported({2, 1, 512, 512})) << "head_dim past the block";
}

}  // namespace
}  // namespace kiln::cuda
