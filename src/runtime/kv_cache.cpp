#include "runtime/kv_cache.h"

namespace kiln::runtime {

std::string_view kv_cache_dtype_name(KvCacheDtype dtype) {
  switch (dtype) {
    case KvCacheDtype::kBF16: return "bf16";
    case KvCacheDtype::kFP8: return "fp8";
    case KvCacheDtype::kF32: break;
  }
  return "fp32";
}

Expected<KvCacheDtype> parse_kv_cache_dtype(std::string_view name) {
  if (name == "fp32") return KvCacheDtype::kF32;
  if (name == "bf16") return KvCacheDtype::kBF16;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::kFP8;
  return invalid_argument("KV cache dtype '" + std::string(name) + "' is not one of fp32, bf16, fp8");
}

Expected<std::optional<KvCacheDtype>> parse_kv_cache_dtype_choice(std::string_view name) {
  if (name == "auto") return std::optional<KvCacheDtype>();
  const Expected<KvCacheDtype> dtype = parse_kv_cache_dtype(name);
  if (!dtype) return invalid_argument("KV cache dtype '" + std::string(name) + "' is not one of auto, fp32, bf16, fp8");
  return std::optional<KvCacheDtype>(*dtype);
}

KvCache::KvCache(const KvCacheSpec& spec) : KvCache(spec, std::make_unique<HostBuffer>(spec.bytes())) {}

KvCache::KvCache(const KvCacheSpec& spec, std::unique_ptr<DeviceBuffer> storage)
    : spec_(spec), storage_(std::move(storage)) {
  KILN_CHECK(storage_ && storage_->bytes() >= spec.bytes());
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
