// Reading and writing KV-cache elements in the CUDA kernels: a cache holds floats, bf16 values
// (__nv_bfloat16, written rounded to nearest even, widened exactly when read) or OCP e4m3 bytes
// (__nv_fp8_e4m3, written rounded to nearest even and saturated at +-448, as float_to_e4m3 of
// base/half.h does on the CPU; widened exactly). The kernels are templates over the element
// type; these overloads, with load4 and store1 of cuda_vec.cuh for the 16- and 32-bit elements,
// are their only difference. with_kv_element calls a function with a value of the type a
// KvCacheDtype names, for the launchers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/cuda_vec.cuh"

namespace kiln::cuda {

__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float kv_load(const __nv_fp8_e4m3* p) { return static_cast<float>(*p); }

// Two e4m3 bytes (the low 16 bits of `pair`) as two floats, through the exact conversion to fp16.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Four consecutive e4m3 elements (4-byte aligned), as load4 reads the other types.
__device__ __forceinline__ float4 load4(const __nv_fp8_e4m3* p) {
  const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
  const float2 a = e4m3x2_to_float2(u), b = e4m3x2_to_float2(u >> 16);
  return make_float4(a.x, a.y, b.x, b.y);
}

__device__ __forceinline__ void store1(__nv_fp8_e4m3* p, float v) { *p = __nv_fp8_e4m3(v); }

// Four consecutive elements (as load4) through the read-only data cache.
__device__ __forceinline__ float4 kv_ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 kv_ldg4(const __nv_bfloat16* p) {
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ float4 kv_ldg4(const __nv_fp8_e4m3* p) {
  const uint32_t u = __ldg(reinterpret_cast<const unsigned int*>(p));
  const float2 a = e4m3x2_to_float2(u), b = e4m3x2_to_float2(u >> 16);
  return make_float4(a.x, a.y, b.x, b.y);
}

// fn(T{}) for the element type T that `element` names.
template <typename Fn>
void with_kv_element(KvCacheDtype element, Fn&& fn) {
  switch (element) {
    case KvCacheDtype::kBF16: fn(__nv_bfloat16{}); return;
    case KvCacheDtype::kFP8: fn(__nv_fp8_e4m3{}); return;
    case KvCacheDtype::kF32: fn(float{}); return;
  }
}

}  // namespace kiln::cuda
