// WeightFormat: how a 2-D weight [rows, cols] is laid out in an engine file, and the reference
// (scalar) quantisers and dequantisers for each format. The layout is the contract between the
// build (which writes it) and every backend (which reads it), so it is defined here, once.
//
// Row formats store rows contiguously, one after another (row r starts at r * row_bytes()), so
// a backend can gather one row (an embedding lookup) or split rows among threads without
// knowing more than this header.
//
//   kF32, kF16, kBF16  row = cols elements.
//   kI8Channel         row = cols int8 values q, then one float scale s; w = s * q.
//   kI8Group{32,128}   row = cols/G blocks of {fp16 s; int8 q[G]}; w = s * q.
//   kI4Group{32,128}   row = cols/G blocks of {fp16 s; uint8 q[G/2]}; element i < G/2 of the
//                      block is the low nibble of q[i], element i + G/2 the high nibble of q[i];
//                      w = s * (nibble - 8).
//   kF8E4M3            row = cols e4m3 bytes q (base/half.h), then 16 bytes: the float scale s
//                      and 12 zero bytes; w = s * q. One scale for the whole weight (per tensor,
//                      s = max|w| / 448), repeated in every row so that a row reads on its own;
//                      the 16-byte tail keeps rows 16-byte aligned, as an fp8 GEMM reads them.
//                      Needs cols % 16 == 0.
// Quantisation is symmetric, round to nearest: int8 s = max|w| / 127, int4 s = max|w| / 7, with
// the scale rounded to its stored precision before the values are quantised.
// Blocks are packed without padding (a kI4Group32 block is 18 bytes), so readers use unaligned
// loads. Group formats need cols % G == 0.
//
// Panel formats (suffix "p8") hold the same values as their base row format, with the bytes of
// every 8 consecutive rows ("a panel") interleaved so that one vector load reads the same
// columns of 8 rows: the layout SIMD kernels that compute 8 outputs per vector read. Panel p
// (rows 8p .. 8p+7) occupies bytes [p * 8 * row_bytes, (p + 1) * 8 * row_bytes), so the total
// size is still rows * row_bytes; rows must be a multiple of 8. Within a panel (row j = 0..7):
//   kF16Panel8               element (j, c) at byte 2 * (8c + j).
//   kBF16Panel8              element (j, c) at byte 4 * (8 (c / 2) + j) + 2 (c % 2): lane j of
//                            a 32-byte vector holds columns c and c + 1 (c even) of row j, so
//                            a shift and a mask make two float vectors. Needs cols % 2 == 0.
//   kI8ChannelPanel8         cols / 4 steps of 32 bytes, step s byte 4j + t = q(j, 4s + t);
//                            then the 8 float row scales. Needs cols % 32 == 0.
//   kI4Group32Panel8         cols / 32 blocks of 144 bytes: the 8 rows' fp16 scales, then 4
//                            steps of 32 bytes; step s byte 4j + t holds (j, 32b + 8s + t) in
//                            its low nibble and (j, 32b + 8s + 4 + t) in its high nibble.
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
  kF16Panel8,
  kBF16Panel8,
  kI8ChannelPanel8,
  kI4Group32Panel8,
  kF8E4M3,
};

std::string_view weight_format_name(WeightFormat format);  // "f32", "i4g32", ...
std::optional<WeightFormat> weight_format_from_name(std::string_view name);

// Elements per quantisation group (0 for float formats and per-channel int8).
int weight_format_group(WeightFormat format);
bool weight_format_is_quantized(WeightFormat format);

// Whether a weight with `cols` columns can be stored in `format` (group formats need
// cols % G == 0, integer panel formats cols % 32 == 0, bf16p8 even cols, f8 cols % 16 == 0). Panel formats also need
// rows % weight_format_row_multiple(format) == 0.
bool weight_format_fits(WeightFormat format, int64_t cols);
bool weight_format_fits(WeightFormat format, int64_t rows, int64_t cols);

// 8 for panel formats, 1 for row formats.
int weight_format_row_multiple(WeightFormat format);
bool weight_format_is_panel(WeightFormat format);

// The row format a panel format interleaves (a row format: itself).
WeightFormat weight_format_base(WeightFormat format);

// The panel variant of a row format, if there is one.
std::optional<WeightFormat> weight_format_panel(WeightFormat format);

// Bytes of one stored row; total size is rows * row_bytes.
size_t weight_format_row_bytes(WeightFormat format, int64_t cols);

// Writes rows [0, rows) of src ([rows, cols], row-major float) into dst in `format`.
// dst must hold rows * weight_format_row_bytes(format, cols) bytes.
void weight_quantize(WeightFormat format, const float* src, int64_t rows, int64_t cols, void* dst);

// Reads one stored row of a row format back into float (dst: [cols]). Reference path: plain
// scalar code.
void weight_dequantize_row(WeightFormat format, const void* row_data, int64_t cols, float* dst);

// Reads row r of a whole stored weight ([rows, cols], any format) back into float.
void weight_dequantize_row_at(WeightFormat format, const void* data, int64_t rows, int64_t cols, int64_t r,
                              float* dst);

}  // namespace kiln::ir
