// The matrix product behind f32 convolutions, in the layout images already have: for one image
// and group,
//   y[m, p] = epilogue(bias[m] + sum_k w[m, k] * col[k, p])     m < M, k < K, p < P
// where col is the image itself ([C, P], a 1x1 convolution at unit stride without padding) or
// its patches ([C * kernel positions, P], gathered a tile of output positions at a time, so the
// whole patch matrix never exists). Threads split the output positions of every image of the
// call into tiles; each tile's outputs are finished (bias, sum, epilogue) while they are in cache.
//
// Each output sums its K products in order k = 0, 1, ..., whatever its tile or the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/epilogue.h"

namespace kiln::cpu {

// A 2-D convolution's window, when the patches are gathered by arithmetic instead of a tap table.
struct ConvWindow2d {
  int64_t ih = 0, iw = 0, ow = 0, kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};

struct ConvGemmShape {
  int64_t M = 0;      // output channels of the group
  int64_t K = 0;      // input channels of the group x kernel positions
  int64_t P = 0;      // output positions
  int64_t k_sp = 1;   // kernel positions (K / k_sp input channels)
  int64_t in_sp = 0;  // input positions a channel (x's row length)
  const ConvWindow2d* window = nullptr;  // 2-D: gather patches from this instead of taps
  int64_t images = 1;   // images sharing the weights, x_image and y_image floats apart
  int64_t x_image = 0;
  int64_t y_image = 0;
};

// w: [M, K] row-major; bias: M values or null; x: the group's input channels, [K / k_sp, in_sp];
// taps: null for a 1x1 unit-stride unpadded convolution (then in_sp == P and col is x) or when
// s.window describes a 2-D one, else taps[p * k_sp + kernel position] is the input offset within
// a channel, or -1 in padding.
// y: [M, P] row-major.
void conv_gemm_f32(const float* w, const float* bias, const float* x, const int64_t* taps, float* y,
                   const ConvGemmShape& s, const ir::Epilogue& ep);

}  // namespace kiln::cpu
