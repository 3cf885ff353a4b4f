// Activation quantisation for the integer-dot ("q8dot") matmul kernels. Each row of x is cut
// into blocks of kQ8Block values; a block is stored as int8 q[i] = round(x[i] / d) with
// d = max|x| / 127 (round to nearest even, so |x[i] - d * q[i]| <= d / 2), its float scale d and
// the integer sum of its q (the int4 kernels use it to remove the weights' +8 offset).
// A row whose length is not a multiple of kQ8Block is padded with zeros (q = 0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/cpu_isa.h"

namespace kiln::cpu {

inline constexpr int kQ8Block = 32;

// Views into storage owned by someone else (the matmul kernels use per-thread scratch).
struct Q8Rows {
  int64_t rows = 0;
  int64_t cols = 0;      // logical row length
  int64_t blocks = 0;    // ceil(cols / kQ8Block)
  int8_t* q = nullptr;   // [rows, blocks * kQ8Block]
  float* d = nullptr;    // [rows, blocks]
  int32_t* sum = nullptr;  // [rows, blocks]: sum of the block's q

  int64_t q_stride() const { return blocks * kQ8Block; }
};

// Bytes needed for `rows` x `cols` (q, d and sum, each 64-byte aligned).
size_t q8_rows_bytes(int64_t rows, int64_t cols);

// Lays out a Q8Rows over `storage` (64-byte aligned, q8_rows_bytes(rows, cols) bytes).
Q8Rows q8_rows_view(void* storage, int64_t rows, int64_t cols);

// Quantises row `r` of x ([rows, cols], row stride cols) into out. `isa` picks the code path;
// every path gives bit-identical results.
void q8_quantize_row(const float* x_row, int64_t r, const Q8Rows& out, Isa isa);

}  // namespace kiln::cpu
