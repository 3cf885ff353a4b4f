// What one cached key or value element is, shared by the runtime (KvCacheSpec) and the backends'
// attention kernels, which include nothing else of the runtime.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::runtime {

// fp32 (exact); bf16 (rounded to nearest even when stored; half the memory and half the bytes
// attention reads); or fp8, OCP e4m3 (base/half.h: rounded to nearest even, saturating at +-448,
// with no scale; a quarter of fp32's bytes, at a relative error of up to 1/16 an element). Every
// element is widened exactly when read. Backends say which they run.
enum class KvCacheDtype : uint8_t { kF32, kBF16, kFP8 };

constexpr size_t kv_cache_dtype_bytes(KvCacheDtype dtype) {
  return dtype == KvCacheDtype::kFP8 ? 1 : dtype == KvCacheDtype::kBF16 ? 2 : 4;
}

}  // namespace kiln::runtime
