// Row lookups on the GPU: the token embedding (rows of a weight table in a float or integer row
// format, widened to fp32) and gather_rows (the rows whose logits a step returns). Device buffers owned
// by the caller; ids and rows are valid row indices (the executor checked the token ids).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ir/weight_format.h"

namespace kiln::cuda {

// Whether launch_embedding reads tables stored in `format` (f32, f16, bf16, i8c, i8g*, i4g*).
bool embedding_supports(ir::WeightFormat format);

// table: [vocab, hidden] in `format`; ids: [t]; y: [t, hidden] fp32.
void launch_embedding(const void* table, ir::WeightFormat format, int64_t hidden, const int32_t* ids, int64_t t,
                      float* y, cudaStream_t stream);

// x: [*, cols]; rows: [r]; y: [r, cols], y[i] = x[rows[i]].
void launch_gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t r, float* y, cudaStream_t stream);

}  // namespace kiln::cuda
