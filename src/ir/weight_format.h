// WeightFormat: how a 2-D weight [rows, cols] is laid out in an engine file, and the reference
// (scalar) quantisers and dequantisers for each format. The layout is the contract between the
// build (which writes it) and every backend (which reads it), so it is defined here, once.
//
// Every format stores rows contiguously, one after another (row r starts at r * row_bytes()), so
// a backend can gather one row (an embedding lookup) or split rows among threads without
// knowing more than this header.
//
//   kF32, kF16, kBF16  row = cols elements.
//   kI8Channel         row = cols int8 values q, then one float scale s; w = s * q.
//   kI8Group{32,128}   row = cols/G blocks of {fp16 s; int8 q[G]}; w = s * q.
//   kI4Group{32,128}   row = cols/G blocks of {fp16 s; uint8 q[G/2]}; element i < G/2 of the
//                      block is the low nibble of q[i], element i + G/2 the high nibble of q[i];
//                      w = s * (nibble - 8).
// Quantisation is symmetric, round to nearest: int8 s = max|w| / 127, int4 s = max|w| / 7, with
// the scale rounded to its stored precision before the values are quantised.
// Blocks are packed without padding (a kI4Group32 block is 18 bytes), so readers use unaligned
// loads. Group formats need cols % G == 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kiln::ir {

enum class WeightFormat : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI8Channel,
  kI8Group32,
  kI8Group128,
  kI4Group32,
  kI4Group128,
};

std::string_view weight_format_name(WeightFormat format);  // "f32", "i4g32", ...
std::optional<WeightFormat> weight_format_from_name(std::string_view name);

// Elements per quantisation group (0 for float formats and per-channel int8).
int weight_format_group(WeightFormat format);
bool weight_format_is_quantized(WeightFormat format);

// Whether a [rows, cols] weight can be stored in `format` (group formats need cols % G == 0).
bool weight_format_fits(WeightFormat format, int64_t cols);

// Bytes of one stored row; total size is rows * row_bytes.
size_t weight_format_row_bytes(WeightFormat format, int64_t cols);

// Writes rows [0, rows) of src ([rows, cols], row-major float) into dst in `format`.
// dst must hold rows * weight_format_row_bytes(format, cols) bytes.
void weight_quantize(WeightFormat format, const float* src, int64_t rows, int64_t cols, void* dst);

// Reads one stored row back into float (dst: [cols]). Reference path: plain scalar code.
void weight_dequantize_row(WeightFormat format, const void* row_data, int64_t cols, float* dst);

}  // namespace kiln::ir
