#include "backends/cuda/layers/cuda_embedding.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/gemm/cuda_quant.cuh"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// One block per token: table: [vocab, hidden] of T, y: [t, hidden].
template <typename T>
__global__ void embedding_kernel(const T* table, int64_t hidden, const int32_t* ids, float* y) {
  kernel_prologue();
  const T* row = table + static_cast<int64_t>(ids[blockIdx.x]) * hidden;
  float* out = y + blockIdx.x * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += kThreads) out[j] = to_float(row[j]);
}

// The same for a table in an integer row format (cuda_quant.cuh), widened element by element.
__global__ void embedding_quant_kernel(ir::WeightFormat format, const uint8_t* table, size_t row_bytes, int64_t hidden,
                                       const int32_t* ids, float* y) {
  kernel_prologue();
  const int64_t r = ids[blockIdx.x];
  float* out = y + blockIdx.x * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += kThreads) out[j] = quant_element(format, table, row_bytes, hidden, r, j);
}

// One block per gathered row.
__global__ void gather_rows_kernel(const float* x, int64_t cols, const int32_t* rows, float* y) {
  kernel_prologue();
  const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * cols;
  float* dst = y + blockIdx.x * cols;
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) dst[j] = src[j];
}

bool is_quantized_row_format(ir::WeightFormat format) {
  return ir::weight_format_is_quantized(format) && !ir::weight_format_is_panel(format);
}

}  // namespace

bool embedding_supports(ir::WeightFormat format) {
  return format == ir::WeightFormat::kF32 || format == ir::WeightFormat::kF16 || format == ir::WeightFormat::kBF16 ||
         is_quantized_row_format(format);
}

void launch_embedding(const void* table, ir::WeightFormat format, int64_t hidden, const int32_t* ids, int64_t t,
                      float* y, cudaStream_t stream) {
  if (t <= 0) return;
  const auto blocks = static_cast<unsigned>(t);
  if (is_quantized_row_format(format)) {
    launch(embedding_quant_kernel, blocks, kThreads, 0, stream, format, static_cast<const uint8_t*>(table),
           ir::weight_format_row_bytes(format, hidden), hidden, ids, y);
    return;
  }
  switch (format) {
    case ir::WeightFormat::kF16:
      launch(embedding_kernel<__half>, blocks, kThreads, 0, stream, static_cast<const __half*>(table), hidden, ids, y);
      break;
    case ir::WeightFormat::kBF16:
      launch(embedding_kernel<__nv_bfloat16>, blocks, kThreads, 0, stream, static_cast<const __nv_bfloat16*>(table),
             hidden, ids, y);
      break;
    default:
      launch(embedding_kernel<float>, blocks, kThreads, 0, stream, static_cast<const float*>(table), hidden, ids, y);
      break;
  }
}

void launch_gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t r, float* y, cudaStream_t stream) {
  if (r > 0) launch(gather_rows_kernel, static_cast<unsigned>(r), kThreads, 0, stream, x, cols, rows, y);
}

}  // namespace kiln::cuda
