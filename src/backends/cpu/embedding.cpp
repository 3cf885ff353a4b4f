#include "backends/cpu/embedding.h"

#include <cstring>

namespace kiln::cpu {
namespace {
constexpr int64_t kParallelMin = int64_t{1} << 15;  // output elements
}  // namespace

void embedding(const std::byte* table, ir::WeightFormat format, int64_t hidden, const int32_t* ids,
               int64_t t, float* y) {
  const size_t row_bytes = ir::weight_format_row_bytes(format, hidden);
  // One row per token: the reference dequantiser is as fast as the memory it reads here, since
  // every byte of a gathered row is touched once.
#pragma omp parallel for schedule(static) if (t * hidden >= kParallelMin)
  for (int64_t i = 0; i < t; ++i) {
    const std::byte* row = table + static_cast<size_t>(ids[i]) * row_bytes;
    ir::weight_dequantize_row(format, row, hidden, y + i * hidden);
  }
}

void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t r, float* y) {
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(float);
#pragma omp parallel for schedule(static) if (r * cols >= kParallelMin)
  for (int64_t i = 0; i < r; ++i) {
    std::memcpy(y + i * cols, x + static_cast<int64_t>(rows[i]) * cols, row_bytes);
  }
}

}  // namespace kiln::cpu
