#include "runtime/kv_cache.h"

namespace kiln::runtime {

KvCache::KvCache(const KvCacheSpec& spec) : spec_(spec) {
  const auto per_layer = static_cast<size_t>(spec.num_blocks * spec.block_size * spec.num_kv_heads * spec.head_dim);
  k_.assign(static_cast<size_t>(spec.num_layers), std::vector<float>(per_layer));
  v_.assign(static_cast<size_t>(spec.num_layers), std::vector<float>(per_layer));
  free_.reserve(static_cast<size_t>(spec.num_blocks));
  for (int64_t b = spec.num_blocks; b-- > 0;) free_.push_back(static_cast<int32_t>(b));
}

Status KvCache::kv_cache_reserve(std::vector<int32_t>& table, int64_t num_positions) {
  const int64_t need = (num_positions + spec_.block_size - 1) / spec_.block_size;
  const int64_t extra = need - static_cast<int64_t>(table.size());
  if (extra <= 0) return Status::ok();
  if (extra > free_blocks()) {
    return invalid_argument("KV cache is full: " + std::to_string(num_positions) + " positions need " +
                            std::to_string(extra) + " more blocks of " + std::to_string(spec_.block_size) +
                            " but " + std::to_string(free_blocks()) + " are free");
  }
  for (int64_t i = 0; i < extra; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return Status::ok();
}

void KvCache::kv_cache_free(std::vector<int32_t>& table) {
  for (auto b : table) free_.push_back(b);
  table.clear();
}

}  // namespace kiln::runtime
