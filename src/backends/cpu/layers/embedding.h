// Token embedding lookup and row gathering for the CPU backend.
//
// The caller owns every buffer and has checked the row ids against the table (ids come from a
// tokenizer or a request, and are validated where they enter the runtime).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ir/weight_format.h"

namespace kiln::cpu {

// table: [vocab, hidden] stored in `format` (see ir/weight_format.h; row r starts at
// r * weight_format_row_bytes(format, hidden)); ids: [t], each in [0, vocab); y: [t, hidden].
// y[i, :] = dequantised row ids[i].
void embedding(const std::byte* table, ir::WeightFormat format, int64_t hidden, const int32_t* ids,
               int64_t t, float* y);

// x: [*, cols]; rows: [r], each a valid row of x; y: [r, cols], y[i, :] = x[rows[i], :].
// y must not overlap x. Used to keep only the rows whose logits are needed.
void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t r, float* y);

}  // namespace kiln::cpu
