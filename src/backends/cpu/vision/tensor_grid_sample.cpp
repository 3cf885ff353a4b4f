// The GridSample tensor kernel (4-D): x [N, C, H, W], grid [N, Ho, Wo, 2] of normalised (x, y)
// in [-1, 1] -> y [N, C, Ho, Wo], each output the input sampled at its grid point, in f64.
// A grid point maps to pixel coordinates by align_corners (1: -1 and 1 are the corner pixels'
// centres; 0: their outer edges). `mode` bilinear weighs the 4 neighbours, nearest takes the
// closest (ties to even), bicubic weighs 4 x 4 with Keys' kernel (a = -0.75). A point outside
// the image is clamped (padding_mode border) or mirrored (reflection) first; with zeros, pixels
// outside the image read as 0.
#include <algorithm>
#include <cmath>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Tensor;

enum class Padding { kZeros, kBorder, kReflection };

double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double d = lo - x;
    const auto k = static_cast<int64_t>(d / range);
    const double r = d - static_cast<double>(k) * range;
    return k % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double d = x - hi;
    const auto k = static_cast<int64_t>(d / range);
    const double r = d - static_cast<double>(k) * range;
    return k % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

void cubic_coeffs(double t, double c[4]) {
  constexpr double A = -0.75;
  t = std::fabs(t);
  c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
  c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
  c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
}

Status grid_sample(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &grid = *in[1];
  if (x.rank() != 4 || grid.rank() != 4 || grid.shape()[3] != 2 || grid.shape()[0] != x.shape()[0]) {
    return tensor_error(n, "x must be [N, C, H, W] and grid [N, Ho, Wo, 2]");
  }
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = grid.shape()[1], Wo = grid.shape()[2];
  const bool corners = n.attr_int("align_corners", 0) != 0;
  const std::string mode = n.attr_str("mode", "bilinear"), pad_name = n.attr_str("padding_mode", "zeros");
  const Padding pad = pad_name == "border" ? Padding::kBorder : pad_name == "reflection" ? Padding::kReflection : Padding::kZeros;
  const double x_lo = corners ? 0.0 : -0.5, x_hi = corners ? static_cast<double>(W - 1) : static_cast<double>(W) - 0.5;
  const double y_lo = corners ? 0.0 : -0.5, y_hi = corners ? static_cast<double>(H - 1) : static_cast<double>(H) - 0.5;
  const std::vector<double> xv = ir::tensor_to_f64(x), gv = ir::tensor_to_f64(grid);
  Tensor y(x.dtype(), {N, C, Ho, Wo});
  auto pixel = [&](const double* img, int64_t r, int64_t c) {
    if (pad == Padding::kZeros) return (r >= 0 && r < H && c >= 0 && c < W) ? img[r * W + c] : 0.0;
    if (pad == Padding::kReflection) {
      c = static_cast<int64_t>(reflect(static_cast<double>(c), x_lo, x_hi));
      r = static_cast<int64_t>(reflect(static_cast<double>(r), y_lo, y_hi));
    }
    return img[std::clamp<int64_t>(r, 0, H - 1) * W + std::clamp<int64_t>(c, 0, W - 1)];
  };
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t i = 0; i < Ho * Wo; ++i) {
      const double gx = gv[static_cast<size_t>((b * Ho * Wo + i) * 2)], gy = gv[static_cast<size_t>((b * Ho * Wo + i) * 2 + 1)];
      double px = corners ? (gx + 1) / 2 * static_cast<double>(W - 1) : ((gx + 1) * static_cast<double>(W) - 1) / 2;
      double py = corners ? (gy + 1) / 2 * static_cast<double>(H - 1) : ((gy + 1) * static_cast<double>(H) - 1) / 2;
      if (mode == "nearest") {
        px = std::nearbyint(px);
        py = std::nearbyint(py);
      }
      if (px < x_lo || px > x_hi || py < y_lo || py > y_hi) {
        if (pad == Padding::kBorder) {
          px = std::clamp(px, 0.0, static_cast<double>(W - 1));
          py = std::clamp(py, 0.0, static_cast<double>(H - 1));
        } else if (pad == Padding::kReflection) {
          px = reflect(px, x_lo, x_hi);
          py = reflect(py, y_lo, y_hi);
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        const double* img = xv.data() + (b * C + c) * H * W;
        double v = 0.0;
        if (mode == "nearest") {
          v = pixel(img, static_cast<int64_t>(py), static_cast<int64_t>(px));
        } else if (mode == "bicubic") {
          const int64_t x0 = static_cast<int64_t>(std::floor(px)) - 1, y0 = static_cast<int64_t>(std::floor(py)) - 1;
          double cx[4], cy[4];
          cubic_coeffs(px - static_cast<double>(x0) - 1, cx);
          cubic_coeffs(py - static_cast<double>(y0) - 1, cy);
          for (int64_t r = 0; r < 4; ++r) {
            double row = 0.0;
            for (int64_t k = 0; k < 4; ++k) row += cx[k] * pixel(img, y0 + r, x0 + k);
            v += cy[r] * row;
          }
        } else {
          const auto x1 = static_cast<int64_t>(std::floor(px)), y1 = static_cast<int64_t>(std::floor(py));
          const double dx1 = px - static_cast<double>(x1), dx2 = static_cast<double>(x1 + 1) - px;
          const double dy1 = py - static_cast<double>(y1), dy2 = static_cast<double>(y1 + 1) - py;
          v = dy2 * (dx2 * pixel(img, y1, x1) + dx1 * pixel(img, y1, x1 + 1)) +
              dy1 * (dx2 * pixel(img, y1 + 1, x1) + dx1 * pixel(img, y1 + 1, x1 + 1));
        }
        ir::tensor_set_f64(y, (b * C + c) * Ho * Wo + i, v);
      }
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_grid_sample_kernels(TensorKernelTable& table) { table["GridSample"] = grid_sample; }

}  // namespace kiln::cpu
