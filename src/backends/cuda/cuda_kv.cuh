// Reading and writing KV-cache elements in the CUDA kernels: a cache holds floats, or bf16 values
// (__nv_bfloat16, written rounded to nearest even, widened exactly when read). The kernels are
// templates over the element type; these overloads, with load4 and store1 of cuda_vec.cuh for
// four elements and for stores, are their only difference.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/cuda_vec.cuh"

namespace kiln::cuda {

__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Four consecutive elements (as load4) through the read-only data cache.
__device__ __forceinline__ float4 kv_ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 kv_ldg4(const __nv_bfloat16* p) {
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xffff0000u));
}

}  // namespace kiln::cuda
