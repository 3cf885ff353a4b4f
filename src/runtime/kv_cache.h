// The paged KV cache: per layer, K and V pools of fixed-size blocks, and the free list that
// hands blocks to sequences. A sequence's block table lists the blocks holding its positions
// [i * block_size, (i + 1) * block_size). The cache owns the storage; callers own block tables
// and return blocks with kv_cache_free when a sequence ends. Host memory: this is the CPU
// backend's cache, shaped so that a device backend can hold the same layout.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace kiln::runtime {

struct KvCacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  size_t bytes() const {
    return static_cast<size_t>(2 * num_layers * num_blocks * block_size * num_kv_heads * head_dim) * sizeof(float);
  }
};

class KvCache {
 public:
  explicit KvCache(const KvCacheSpec& spec);

  const KvCacheSpec& spec() const { return spec_; }
  // layer l: [num_blocks, block_size, num_kv_heads, head_dim]
  float* k(int64_t layer) { return k_[static_cast<size_t>(layer)].data(); }
  float* v(int64_t layer) { return v_[static_cast<size_t>(layer)].data(); }

  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  // Grows `table` until it covers `num_positions` positions; fails (leaving it unchanged) when
  // the pool is out of blocks.
  Status kv_cache_reserve(std::vector<int32_t>& table, int64_t num_positions);
  // Returns every block of `table` to the pool and clears it.
  void kv_cache_free(std::vector<int32_t>& table);

 private:
  KvCacheSpec spec_;
  std::vector<std::vector<float>> k_, v_;
  std::vector<int32_t> free_;
};

}  // namespace kiln::runtime
