// The paged KV cache: per layer, K and V pools of fixed-size blocks, and a simple free list that
// hands blocks to sequences. A sequence's block table lists the blocks holding its positions
// [i * block_size, (i + 1) * block_size). The cache owns its storage, one DeviceBuffer on the
// device of the backend that runs it (Executor::create_kv_cache), or host memory for the CPU
// backend and tests (the one-argument constructor). Callers own block tables.
//
// Two ways to hand out blocks: kv_cache_reserve / kv_cache_free (one sequence at a time: kiln
// run, eval, bench), or a block manager that owns every block id of the cache itself (the
// serving loop's llm/scheduling). A cache is used one way or the other, never both.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "runtime/device_buffer.h"
#include "runtime/kv_cache_dtype.h"

namespace kiln::runtime {

std::string_view kv_cache_dtype_name(KvCacheDtype dtype);
// "fp32", "bf16" or "fp8" (also "fp8_e4m3").
Expected<KvCacheDtype> parse_kv_cache_dtype(std::string_view name);
// A --kv-cache-dtype value: "fp32", "bf16" or "fp8", or "auto" (nullopt): the element the model's own
// precision gives it (LoadedModel::native_kv_cache_dtype).
Expected<std::optional<KvCacheDtype>> parse_kv_cache_dtype_choice(std::string_view name);

struct KvCacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  KvCacheDtype dtype = KvCacheDtype::kF32;
  size_t element_bytes() const { return kv_cache_dtype_bytes(dtype); }
  // Elements in one layer's K (or V) pool.
  size_t layer_elements() const { return static_cast<size_t>(num_blocks * block_size * num_kv_heads * head_dim); }
  size_t bytes() const { return 2 * static_cast<size_t>(num_layers) * layer_elements() * element_bytes(); }
  // Bytes one block takes over all layers, K and V.
  size_t block_bytes() const {
    return 2 * static_cast<size_t>(num_layers * block_size * num_kv_heads * head_dim) * element_bytes();
  }
};

class KvCache {
 public:
  // Host storage.
  explicit KvCache(const KvCacheSpec& spec);
  // Storage made by a backend; it must hold spec.bytes().
  KvCache(const KvCacheSpec& spec, std::unique_ptr<DeviceBuffer> storage);

  const KvCacheSpec& spec() const { return spec_; }
  const DeviceBuffer& storage() const { return *storage_; }
  // layer l: [num_blocks, block_size, num_kv_heads, head_dim] elements of spec().dtype, on the
  // storage's device.
  void* k_data(int64_t layer) { return base() + static_cast<size_t>(2 * layer) * layer_bytes(); }
  void* v_data(int64_t layer) { return base() + static_cast<size_t>(2 * layer + 1) * layer_bytes(); }
  // The same, for an fp32 cache.
  float* k(int64_t layer) {
    KILN_CHECK(spec_.dtype == KvCacheDtype::kF32);
    return static_cast<float*>(k_data(layer));
  }
  float* v(int64_t layer) {
    KILN_CHECK(spec_.dtype == KvCacheDtype::kF32);
    return static_cast<float*>(v_data(layer));
  }

  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  // Grows `table` until it covers `num_positions` positions; fails (leaving it unchanged) when
  // the pool is out of blocks.
  Status kv_cache_reserve(std::vector<int32_t>& table, int64_t num_positions);
  // Returns every block of `table` to the pool and clears it.
  void kv_cache_free(std::vector<int32_t>& table);

 private:
  std::byte* base() { return static_cast<std::byte*>(storage_->data()); }
  size_t layer_bytes() const { return spec_.layer_elements() * spec_.element_bytes(); }

  KvCacheSpec spec_;
  std::unique_ptr<DeviceBuffer> storage_;
  std::vector<int32_t> free_;
};

}  // namespace kiln::runtime
