#include "backends/cpu/layers/embedding.h"

#include <cstring>

#include "backends/cpu/parallel.h"

namespace kiln::cpu {
namespace {
constexpr int64_t kParallelMin = int64_t{1} << 15;  // output elements
}  // namespace

void embedding(const std::byte* table, ir::WeightFormat format, int64_t hidden, const int32_t* ids,
               int64_t t, float* y) {
  const size_t row_bytes = ir::weight_format_row_bytes(format, hidden);
  // One row per token: the reference dequantiser is as fast as the memory it reads here, since
  // every byte of a gathered row is touched once.
  parallel_for(0, t, t * hidden >= kParallelMin, [&](int64_t i) {
    const std::byte* row = table + static_cast<size_t>(ids[i]) * row_bytes;
    ir::weight_dequantize_row(format, row, hidden, y + i * hidden);
  });
}

void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t r, float* y) {
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(float);
  parallel_for(0, r, r * cols >= kParallelMin, [&](int64_t i) {
    std::memcpy(y + i * cols, x + static_cast<int64_t>(rows[i]) * cols, row_bytes);
  });
}

}  // namespace kiln::cpu
