// How the CUDA backend starts its kernels: through launch(), which lets a kernel launch while the
// kernel before it in the stream still runs (programmatic dependent launch, Hopper), so that its
// blocks are already on the multiprocessors when that kernel ends instead of being launched after it
// drains.
//
// The rule that keeps this correct: every kernel waits (wait_for_prior_kernels(), the first thing
// in kernel_prologue()) before it reads or writes anything. After the wait, every kernel before it
// in the stream has finished and its writes are visible, since each of them waited in turn for
// its own predecessors. allow_next_kernel() lets the next kernel launch: the small kernels call
// it first thing, the GEMVs once their warps have read all their weights.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "backends/cuda/cuda_launch.h"

namespace kiln::cuda {

__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prior_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void kernel_prologue() {
  allow_next_kernel();
  wait_for_prior_kernels();
}

// kernel<<<grid, block, smem, stream>>>(args...), as a dependent launch when `dependent`. A launch
// error is left for cudaGetLastError(), as with <<<>>>.
template <typename... Params, typename... Args>
void launch_as(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
               Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The same, as a dependent launch when dependent launch is on.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_as(dependent_launch(), kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace kiln::cuda
