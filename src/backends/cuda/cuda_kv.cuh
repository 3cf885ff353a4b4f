// Reading and writing KV-cache elements in the CUDA kernels: a cache holds floats, or bf16 values
// (__nv_bfloat16, written rounded to nearest even, widened exactly when read). The kernels are
// templates over the element type; these overloads are their only difference.
#pragma once

#include <cuda_bf16.h>

namespace kiln::cuda {

__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Four consecutive elements (16-byte aligned for floats, 8-byte for bf16).
__device__ __forceinline__ float4 kv_load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 kv_load4(const __nv_bfloat16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}
// The same through the read-only data cache.
__device__ __forceinline__ float4 kv_ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 kv_ldg4(const __nv_bfloat16* p) {
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}

__device__ __forceinline__ void kv_store(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

}  // namespace kiln::cuda
