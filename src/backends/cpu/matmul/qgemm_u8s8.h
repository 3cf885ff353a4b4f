// The integer matrix product behind int8 convolutions and matrix products (kiln.QConv,
// kiln.QMatMul): activations quantised to unsigned bytes with a zero point, weights to signed
// bytes per output row, products summed exactly in int32:
//
//   y[m, p] = epilogue(scale[m] * (sum_k w[m, k] * u[k, p] - zero_point * w_sum[m]) + bias[m])
//
// where u = clamp(round(x / x_scale) + zero_point, 0, 255), scale[m] = x_scale * w_scale[m] and
// w_sum[m] = sum_k w[m, k]. The kernel works a tile of up to kQTile positions at a time, from
// the tile's activations packed four k at a time ([ceil(K / 4)][kQTile][4] bytes, the layout of
// VNNI's unsigned-by-signed byte dot products; padding k >= K holds anything, since it meets
// zero weights).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/epilogue.h"

namespace kiln::cpu {

inline constexpr int kQTile = 64;

struct QGemmWeights {
  const int8_t* w = nullptr;  // [M, K] row-major
  int64_t M = 0, K = 0;
  const int32_t* w_sum = nullptr;  // [M]
  const float* scale = nullptr;    // [M]
  const float* bias = nullptr;     // [M] or null
  int zero_point = 0;
};

// Bytes of one packed tile for K.
inline int64_t qgemm_pack_bytes(int64_t K) { return (K + 3) / 4 * kQTile * 4; }

// Rows [m0, m0 + rows) (rows <= 4) of one packed tile of `npos` positions:
// out[r * kQTile + p] for r < rows, p < npos, before the epilogue.
void qgemm_tile(const QGemmWeights& w, const uint8_t* packed, int npos, int64_t m0, int rows, float* out);

// x as unsigned bytes: u[i] = clamp(round(x[i] / x_scale) + zero_point, 0, 255), half to even.
void quantize_u8(const float* x, int64_t n, float x_scale, int zero_point, uint8_t* u);

// w_sum for QGemmWeights.
std::vector<int32_t> qgemm_row_sums(const int8_t* w, int64_t M, int64_t K);

}  // namespace kiln::cpu
